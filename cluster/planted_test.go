//go:build plantedbugs

package cluster

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/fsm"
)

func TestValidateRefusesAnUnknownPlantedBug(t *testing.T) {
	for name, k := range map[string]TestingKnobs{
		"node": {PlantedBugs: []string{BugLocalReads, "no-such-bug"}},
		"fsm":  {FSM: fsm.TestingKnobs{PlantedBugs: []string{"no-such-bug"}}},
		// An FSM defect is not the node's: PlantedKnobs sorts them.
		"fsm's in the node's": {PlantedBugs: []string{fsm.BugGrantNoMargin}},
	} {
		c := validConfig()
		c.Testing = k
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "unknown planted bugs") {
			t.Errorf("%s: got %v, want a refusal of the unknown bug", name, err)
		}
	}
	k, unknown := PlantedKnobs([]string{BugLocalReads, " " + fsm.BugGrantNoMargin, "", "no-such-bug"})
	if strings.Join(k.PlantedBugs, ",") != BugLocalReads || strings.Join(k.FSM.PlantedBugs, ",") != fsm.BugGrantNoMargin ||
		strings.Join(unknown, ",") != "no-such-bug" {
		t.Fatalf("PlantedKnobs: %+v, unknown %v", k, unknown)
	}
	c := validConfig()
	c.Testing = k
	if err := c.Validate(); err != nil {
		t.Fatalf("known planted bugs: %v", err)
	}
}

// Planted bugs are per node: in one process, the node given them lists
// them (the node's and its FSM's) as unsafe and has them, the others
// neither.
func TestPlantedBugsArePerNodeAndReported(t *testing.T) {
	const pi = 2
	tc := newTestCluster(t, 3, func(c *Config) {
		if c.ID == "n3" {
			c.Testing = TestingKnobs{PlantedBugs: []string{BugLocalReads}, FSM: fsm.TestingKnobs{PlantedBugs: []string{fsm.BugGrantNoMargin}}}
		}
	})
	ctx := ctxT(t)
	for i, n := range tc.nodes {
		want := "insecure"
		if i == pi {
			want = "insecure,planted-bug:grant-no-margin,planted-bug:local-reads"
		}
		if got := reportedUnsafe(ctx, t, n); got != want {
			t.Errorf("%s reports unsafe %q, want %q", n.ID(), got, want)
		}
		if got, want := n.planted(BugLocalReads), i == pi; got != want {
			t.Errorf("%s: local-reads planted %v, want %v", n.ID(), got, want)
		}
	}
}
