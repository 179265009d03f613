package jepsen

import (
	"testing"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// restoreHistory: before the loss (at 1000 ms) w1 got token 5 on r and the
// probe tokens 1, 2 in jn/1-0; the new cluster served at 2000 ms; after it,
// the probe got newProbe in jn/1-0 and wrote with it (probeWrite), w1 got
// newR on r.
func restoreHistory(newProbe, newR uint64, probeWrite string) ([]history.Record, []history.Fault) {
	b := &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 5, "L1", 0, 10*ms, 0).
		Acquire("restore", "p1", "jn/1-0", 1, "P1", 20*ms, 30*ms, 0).
		Acquire("restore", "p2", "jn/1-0", 2, "P2", 40*ms, 50*ms, 0).
		Acquire("restore", "p3", "jn/1-0", newProbe, "P3", 2100*ms, 2110*ms, 0).
		Acquire("w1", "a2", "r", newR, "L2", 2200*ms, 2210*ms, 0)
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: "restore", Op: "p3-w", Type: checker.OpProbeWrite, Resource: "jn/1-0", Token: newProbe, TimeNs: 2120 * ms},
		history.Record{Kind: history.Complete, Worker: "restore", Op: "p3-w", Type: checker.OpProbeWrite, Resource: "jn/1-0", Token: newProbe, TimeNs: 2130 * ms, Result: probeWrite, Error: map[string]string{history.Fail: "fence: stale token"}[probeWrite]})
	faults := []history.Fault{
		{Phase: "start", Kind: history.NemRestore, TimeNs: 1000 * ms},
		{Phase: "heal", Kind: history.NemRestore, TimeNs: 2000 * ms, Effective: true},
	}
	return b.Recs, faults
}

func TestCheckRestorePassesTokensAboveTheLoss(t *testing.T) {
	h, faults := restoreHistory(1<<32+3, 1<<32+6, history.OK)
	if r := checker.CheckRestore(h, faults); r.Verdict != checker.Valid || r.Checked != 3 {
		t.Fatalf("%v", r)
	}
}

func TestCheckRestoreCatchesATokenNotAboveTheLoss(t *testing.T) {
	// Issue 13's restore: the probe's scope, unknown to the backup, starts
	// at 1 again, and fencedkv (highest 2) refuses its new holder.
	h, faults := restoreHistory(1, 1<<32+6, history.Fail)
	r := checker.CheckRestore(h, faults)
	if r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyTokenNotAboveLoss || r.Anomalies != 2 {
		t.Fatalf("%v", r)
	}
	// A restore-mismatch fault is held to the loss the same way.
	for i := range faults {
		faults[i].Kind = history.NemRestoreMismatch
	}
	if r := checker.CheckRestore(h, faults); r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyTokenNotAboveLoss {
		t.Fatalf("restore-mismatch: %v", r)
	}
	// A known scope left where it was is caught too.
	h, faults = restoreHistory(1<<32+3, 5, history.OK)
	if r := checker.CheckRestore(h, faults); r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyTokenNotAboveLoss {
		t.Fatalf("%v", r)
	}
	// The refusal alone is reported as such.
	h, faults = restoreHistory(1<<32+3, 1<<32+6, history.Fail)
	if r := checker.CheckRestore(h, faults); r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyNewHolderRefused {
		t.Fatalf("%v", r)
	}
}

func TestCheckRestoreIgnoresWhatItCannotPlace(t *testing.T) {
	h, faults := restoreHistory(1, 1, history.Fail)
	// No completed restore: unknown, never valid.
	if r := checker.CheckRestore(h, faults[:1]); r.Verdict != history.Unknown {
		t.Fatalf("no heal: %v", r)
	}
	failed := append([]history.Fault(nil), faults...)
	failed[1].Effective = false
	if r := checker.CheckRestore(h, failed); r.Verdict != history.Unknown {
		t.Fatalf("restore that did not complete: %v", r)
	}
	// An acquire in flight across the loss (invoked before the new
	// cluster served) is left out, whatever its token.
	b := &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 5, "L1", 0, 10*ms, 0).
		Acquire("w2", "a2", "r", 3, "L2", 900*ms, 2500*ms, 0).
		Acquire("w1", "a3", "r", 1<<32+6, "L3", 2600*ms, 2610*ms, 0)
	if r := checker.CheckRestore(b.Recs, faults); r.Verdict != checker.Valid || r.Checked != 1 {
		t.Fatalf("in-flight acquire: %v", r)
	}
}

func TestRestoreRunsDoNotRequireWhatARestoreLoses(t *testing.T) {
	var rs []checker.Result
	for _, restore := range []string{history.NemRestore, history.NemRestoreMismatch} {
		rs = rs[:0]
		for _, name := range []string{checker.NameFencedTokens, checker.NameTokens, checker.NameGrantIntervals, checker.NameSafeWindows, checker.NameFinalRead, checker.NameDurable, checker.NameLinearizable, checker.NameRequestIDs, checker.NameRestore} {
			rs = append(rs, checker.Result{Checker: name, Verdict: checker.Invalid})
		}
		checker.MarkRequired([]string{history.NemKill, restore}, rs)
		for _, r := range rs {
			lost := r.Checker == checker.NameGrantIntervals || r.Checker == checker.NameSafeWindows || r.Checker == checker.NameDurable || r.Checker == checker.NameLinearizable || r.Checker == checker.NameRequestIDs
			if r.Required() == lost {
				t.Errorf("%s: %s required %v in a restore run", restore, r.Checker, r.Required())
			}
		}
	}
	for _, k := range nm.InSpecNemeses() {
		if history.IsRestore(k) {
			t.Fatal("restore is in spec: \"all\" would stop requiring linearizability")
		}
	}
}
