package jepsen

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
)

// resolved marks the completion of op as decided from the Raft logs.
func resolved(recs []history.Record, op string) []history.Record {
	for i := range recs {
		if recs[i].Op == op && recs[i].Kind == history.Complete {
			recs[i].ResolvedFrom = ResolvedFromRaftLog
		}
	}
	return recs
}

func TestCheckersTreatAResolvedAcquireAsNeverReturned(t *testing.T) {
	// a1 gave up at 10 ms; the logs say it was granted token 5, applied at
	// some unknown time after its invocation. a2, invoked at 500 ms, got
	// token 3 from an entry before a1's: no regression, since a1's
	// acknowledgement was never seen.
	b := &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 5, "L5", 0, 10*ms, 0).
		Acquire("w2", "a2", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, checker.CheckTokensUniqueMonotonic(resolved(b.Recs, "a1")), checker.Valid, "")
	// Token reuse is still caught with a resolved grant.
	c := &checkertest.HB{}
	c.Acquire("w1", "a1", "r", 3, "L5", 0, 10*ms, 0).
		Acquire("w2", "a2", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, checker.CheckTokensUniqueMonotonic(resolved(c.Recs, "a1")), checker.Invalid, checker.AnomalyTokenReused)
	// The client never had the lease: no safe window.
	if ws := checker.SafeWindows(resolved((&checkertest.HB{}).Acquire("w1", "a1", "r", 5, "L5", 0, 10*ms, 0).Recs, "a1")); len(ws) != 0 {
		t.Fatalf("windows of a resolved acquire: %+v", ws)
	}

	// Linearizability: l2's acquire was granted token 1 (resolved) and
	// never released; a read after its give-up time sees it as the holder.
	l := &checkertest.Lin{}
	l.Acquire("l2", "l2-a", 0, 10*ms, 1, "K1").
		Read("l1", "l1-g", 5*ms, 8*ms, "", 0).
		Read("l1", "l1-h", 20*ms, 30*ms, "K1", 1)
	expect(t, checker.CheckLinearizable(resolved(l.Recs, "l2-a"), time.Minute), checker.Valid, "")
	// The resolved outcome is still checked: a read that sees the counter
	// at 1 with no holder contradicts the grant of token 1 to K1, which
	// nothing released.
	m := &checkertest.Lin{}
	m.Acquire("l2", "l2-a", 0, 10*ms, 1, "K1").
		Read("l1", "l1-g", 20*ms, 30*ms, "", 1).
		Read("l1", "l1-h", 40*ms, 50*ms, "K1", 1)
	expect(t, checker.CheckLinearizable(resolved(m.Recs, "l2-a"), time.Minute), checker.Invalid, checker.AnomalyNotLinearizable)
	// Resolved as not applied: left out, it constrains nothing.
	n := &checkertest.Lin{}
	n.Op("l2", "l2-a", history.OpAcquire, 0, 10*ms, history.Fail, 0, "", "resolved from the raft logs: not applied", "").
		Read("l1", "l1-g", 20*ms, 30*ms, "", 0)
	expect(t, checker.CheckLinearizable(resolved(n.Recs, "l2-a"), time.Minute), checker.Valid, "")
}
