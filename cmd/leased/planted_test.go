//go:build plantedbugs

package main

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/internal/planted"
)

// LEASEFENCE_PLANTED_BUGS becomes the node's knobs, the FSM's defects in
// the FSM's; an unknown name is refused.
func TestPlantedBugsFromTheEnvironmentBecomeTheNodesKnobs(t *testing.T) {
	t.Setenv(planted.Env, cluster.BugLocalReads+", "+fsm.BugGrantNoMargin)
	k, on, err := plantedKnobs()
	if err != nil || len(on) != 2 || strings.Join(k.PlantedBugs, ",") != cluster.BugLocalReads ||
		strings.Join(k.FSM.PlantedBugs, ",") != fsm.BugGrantNoMargin {
		t.Fatalf("knobs %+v, on %v, err %v", k, on, err)
	}
	t.Setenv(planted.Env, cluster.BugLocalReads+",no-such-bug")
	if _, _, err := plantedKnobs(); err == nil || !strings.Contains(err.Error(), "unknown planted bugs no-such-bug") {
		t.Fatalf("unknown bug: %v", err)
	}
	t.Setenv(planted.Env, "")
	if k, on, err := plantedKnobs(); err != nil || on != nil || k.PlantedBugs != nil || k.FSM.PlantedBugs != nil {
		t.Fatalf("unset: %+v %v %v", k, on, err)
	}
}
