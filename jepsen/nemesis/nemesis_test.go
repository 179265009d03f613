package nemesis

import (
	"slices"
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

func TestParseNemeses(t *testing.T) {
	// "all" is every nemesis but the out-of-spec clock-rate and
	// clock-rate-client-pause, the three restores, the two drift-edge
	// ones (which set up the whole run), lose-tail (its watch gaps) and
	// slow-disk (a FUSE mount under the whole run).
	if ks, err := ParseNemeses("all"); err != nil || len(ks) != len(AllNemeses)-9 || slices.Contains(ks, history.NemSlowDisk) {
		t.Fatal(ks, err)
	}
	if _, err := ParseNemeses("kill,partition"); err == nil {
		t.Fatal("unknown nemesis accepted")
	}
}

// lose-tail without snapshot keeps the whole log (no snapshot installs, no
// watch gaps); every other run keeps 32 entries past a snapshot.
func TestSnapshotArgsKeepTheLogForLoseTailAlone(t *testing.T) {
	for _, c := range []struct {
		nemeses  []string
		trailing string
	}{
		{nil, "32"},
		{[]string{history.NemLoseTail}, "1000000"},
		{[]string{history.NemLoseTail, history.NemKill}, "1000000"},
		{[]string{history.NemLoseTail, history.NemSnapshot}, "32"},
		{[]string{history.NemSnapshot}, "32"},
	} {
		args := SnapshotArgs(c.nemeses)
		i := slices.Index(args, "--trailing-logs")
		if i < 0 || i+1 >= len(args) || args[i+1] != c.trailing || slices.Index(args[i+1:], "--trailing-logs") >= 0 {
			t.Errorf("%v: %v, want --trailing-logs %s once", c.nemeses, args, c.trailing)
		}
	}
}

// lost-voter's faults alternate between a start with the founding
// --bootstrap list (first), one with --join, and one with the --bootstrap
// list while every other node is down; a node that did not found the
// cluster always joins.
func TestLostVoterAlternatesBootstrapAndJoin(t *testing.T) {
	founders := []string{"n1", "n2", "n3"}
	for _, c := range []struct {
		fault int
		id    string
		want  string
	}{
		{0, "n2", history.LostVoterViaBootstrap},
		{1, "n2", history.LostVoterViaJoin},
		{2, "n3", history.LostVoterViaBootstrapAlone},
		{3, "n1", history.LostVoterViaBootstrap},
		{4, "n1", history.LostVoterViaJoin},
		{5, "n2", history.LostVoterViaBootstrapAlone},
		{0, "n4", history.LostVoterViaJoin},
		{2, "n4", history.LostVoterViaJoin},
	} {
		if got := lostVoterVia(c.fault, c.id, founders); got != c.want {
			t.Errorf("fault %d on %s: %s, want %s", c.fault, c.id, got, c.want)
		}
	}
}
