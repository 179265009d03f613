package jepsen

import (
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// TestCheckStorageRefusedCatchesANodeThatServedOn: the checker fails a
// run in which a node came up on a changed raft.db and applied past the
// entry, and passes refusals and self-fencing.
func TestCheckStorageRefusedCatchesANodeThatServedOn(t *testing.T) {
	heal := func(o history.StorageOutcome) history.Fault {
		return history.Fault{Phase: "heal", Kind: history.NemStorage, Target: "n2", TimeNs: int64(time.Second), Storage: &o}
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 12, Fenced: true}),
		heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", SetAside: true})}); r.Verdict != checker.Valid || r.Checked != 3 {
		t.Fatalf("refused and fenced: %v", r)
	}
	r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 14, Served: true})})
	if r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyServedFromCorruptStore {
		t.Fatalf("served on: %v", r)
	}
	r = checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", Served: true})})
	if r.Verdict != checker.Invalid || !strings.Contains(r.Witness, "snapshot") {
		t.Fatalf("restored a changed snapshot: %v", r)
	}
	if r := checker.CheckStorageRefused(nil); r.Verdict != history.Unknown {
		t.Fatalf("no fault: %v", r)
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 3})}); r.Verdict != history.Unknown {
		t.Fatalf("undecided: %v", r)
	}
}
