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
