package checker

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
)

const ms = int64(time.Millisecond)

func expect(t *testing.T, r Result, verdict, anomaly string) {
	t.Helper()
	if r.Verdict != verdict || r.Anomaly != anomaly {
		t.Fatalf("%s: got %s %q (%s), want %s %q", r.Checker, r.Verdict, r.Anomaly, r.Witness, verdict, anomaly)
	}
	if verdict != Valid && r.Witness == "" {
		t.Fatalf("%s: %s without a witness", r.Checker, verdict)
	}
}

func TestValidHistoryPassesEveryChecker(t *testing.T) {
	rs := CheckAll(checkertest.Valid().Recs, checkertest.ValidAudit(), 300*time.Millisecond)
	for _, r := range rs {
		expect(t, r, Valid, "")
	}
	if p, f := Tally(rs); p != 9 || f != 0 {
		t.Fatalf("tally %d passed %d failed", p, f)
	}
}

func TestStaleWriteAcceptedIsCaught(t *testing.T) {
	audit := append(checkertest.ValidAudit(), fencekv.AuditRecord{Seq: 7, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted})
	r := CheckFencedTokensMonotonic(audit, false)
	expect(t, r, Invalid, AnomalyStaleWriteAccepted)
	if !strings.Contains(r.Witness, "#7") {
		t.Fatalf("witness %q does not name the record", r.Witness)
	}
	// Strict mode: an equal token twice is already stale.
	expect(t, CheckFencedTokensMonotonic(checkertest.ValidAudit(), true), Invalid, AnomalyStaleWriteAccepted)
	// Nothing accepted: undecided, not a pass.
	expect(t, CheckFencedTokensMonotonic(nil, false), history.Unknown, "")
}

func TestTokenReusedIsCaught(t *testing.T) {
	b := checkertest.Valid()
	// A second lease with token 2 in the same scope (a replayed counter).
	b.Acquire("w3", "a3", "r", 2, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckTokensUniqueMonotonic(b.Recs), Invalid, AnomalyTokenReused)
	// The same from the cluster's events alone.
	b = checkertest.Valid()
	b.Event("10.0", "granted", "r", 1, "L9", 400*ms, 400*ms, 2400*ms)
	expect(t, CheckTokensUniqueMonotonic(b.Recs), Invalid, AnomalyTokenReused)
	// Replaying one lease (same id) is no reuse.
	b = checkertest.Valid()
	b.Event("10.0", "granted", "r", 2, "L2", 155*ms, 155*ms, 2155*ms)
	expect(t, CheckTokensUniqueMonotonic(b.Recs), Valid, "")
}

func TestTokenRegressionAfterFailoverIsCaught(t *testing.T) {
	// After a failover, an acquire invoked after token 5 was acknowledged
	// gets token 3: the new leader's counter went back.
	b := &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 5, "L5", 0, 10*ms, 2000*ms).
		Acquire("w2", "a2", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckTokensUniqueMonotonic(b.Recs), Invalid, AnomalyTokenRegression)
	// Concurrent acquires may complete in any token order.
	c := &checkertest.HB{}
	c.Acquire("w1", "a1", "r", 5, "L5", 0, 100*ms, 2000*ms).
		Acquire("w2", "a2", "r", 4, "L4", 10*ms, 50*ms, 2000*ms)
	expect(t, CheckTokensUniqueMonotonic(c.Recs), Valid, "")
}

func TestOverlappingGrantsAreCaught(t *testing.T) {
	b := &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		// Granted before L1's expiry plus the margin (2300 ms), not released.
		Event("6.0", "granted", "r", 2, "L2", 2100*ms, 2100*ms, 4100*ms)
	r := CheckGrantIntervals(b.Recs, 300*time.Millisecond)
	expect(t, r, Invalid, AnomalyOverlappingGrants)
	// Strictly after the margin it is fine; at exactly expiry + margin the
	// FSM still refuses, so a grant there is an overlap.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("6.0", "granted", "r", 2, "L2", 2300*ms+1, 2300*ms+1, 4300*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Valid, "")
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("6.0", "granted", "r", 2, "L2", 2300*ms, 2300*ms, 4300*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A lease expired before its margin passed, then the resource granted
	// again: both the expiry and the grant are caught (the reviewer's case).
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("6.0", "expired", "r", 1, "L1", 2001*ms, 0, 2000*ms).
		Event("6.1", "granted", "r", 2, "L2", 2001*ms, 2001*ms, 4001*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyEarlyExpiry)
	// An expired event does not excuse a grant stamped inside the bound.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("6.0", "expired", "r", 1, "L1", 2301*ms, 0, 2000*ms).
		Event("6.1", "granted", "r", 2, "L2", 2301*ms, 2100*ms, 4100*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A proper expiry then grant is valid.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("6.0", "expired", "r", 1, "L1", 2301*ms, 0, 2000*ms).
		Event("6.1", "granted", "r", 2, "L2", 2301*ms, 2301*ms, 4301*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Valid, "")
	// Renewals of a released lease, or of a lease after another was
	// granted, must have been refused.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		Event("5.2", "renewed", "r", 1, "L1", 600*ms, 0, 2600*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		Event("5.2", "granted", "r", 2, "L2", 600*ms, 600*ms, 2600*ms).
		Event("5.3", "renewed", "r", 1, "L1", 700*ms, 0, 2700*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	// Over a gap in the watch stream a renewal of a lease whose grant was
	// not seen is undecided, also when another lease of the resource was
	// (lose-tail: the watcher resumed past a grant); a renewal of a lease
	// seen granted and then superseded stays invalid.
	gap := history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpWatchGap, Op: "gap-1", Error: "out of range"}
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		Event("5.3", "renewed", "r", 2, "L2", 700*ms, 0, 2700*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	expect(t, CheckGrantIntervals(append(b.Recs, gap), 300*time.Millisecond), history.Unknown, "")
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		Event("5.2", "granted", "r", 2, "L2", 600*ms, 600*ms, 2600*ms).
		Event("5.3", "renewed", "r", 1, "L1", 700*ms, 0, 2700*ms)
	expect(t, CheckGrantIntervals(append(b.Recs, gap), 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	// A grant while the previous lease still runs, with a gap after that
	// lease's last event (its release may be in it): undecided; with the
	// gap before that event, the overlap stands.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 60000*ms).
		Event("9.0", "granted", "r", 2, "L2", 900*ms, 900*ms, 60900*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	at := func(pos string) history.Record { g := gap; g.Position = pos; return g }
	expect(t, CheckGrantIntervals(append(b.Recs, at("7.0")), 300*time.Millisecond), history.Unknown, "")
	expect(t, CheckGrantIntervals(append(b.Recs, at("4.0")), 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A renewal past the expiry last seen, with a gap between: undecided.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("8.0", "renewed", "r", 1, "L1", 2100*ms, 0, 4100*ms)
	expect(t, CheckGrantIntervals(append(b.Recs, at("6.0")), 300*time.Millisecond), history.Unknown, "")
	expect(t, CheckGrantIntervals(append(b.Recs, at("9.0")), 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	// A renewal extends the lease: a grant within the old bound overlaps.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "renewed", "r", 1, "L1", 1000*ms, 0, 3000*ms).
		Event("6.0", "granted", "r", 2, "L2", 2500*ms, 2500*ms, 4500*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A renewal after expiry.
	b = &checkertest.HB{}
	b.Event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		Event("5.1", "renewed", "r", 1, "L1", 2100*ms, 0, 4100*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
}

func TestLostAcknowledgedGrantIsCaughtOrUnknownOverAGap(t *testing.T) {
	b := checkertest.Valid()
	b.Acquire("w3", "a3", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), Invalid, AnomalyAckedGrantMissing)
	b.Recs = append(b.Recs, history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpWatchGap, Op: "gap-1", Error: "out of range"})
	expect(t, CheckGrantIntervals(b.Recs, 300*time.Millisecond), history.Unknown, "")
	// Without any event the checker cannot decide.
	expect(t, CheckGrantIntervals(nil, time.Second), history.Unknown, "")
}

func TestOverlappingSafeWindowsAreCaught(t *testing.T) {
	b := &checkertest.HB{}
	// A's safe window runs to 2000 ms; it never releases (paused). B gets
	// the lease at 1500 ms: the windows overlap by 500 ms.
	b.Acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		Acquire("w2", "a2", "r", 2, "L2", 1400*ms, 1500*ms, 3500*ms).
		Release("w2", "r2", "r", 2, "L2", 1600*ms, 3500*ms)
	r := CheckSafeWindowsDisjoint(b.Recs)
	expect(t, r, Invalid, AnomalyOverlappingSafeWindow)
	if !strings.Contains(r.Witness, "w1") || !strings.Contains(r.Witness, "w2") {
		t.Fatalf("witness %q does not name both holders", r.Witness)
	}
	// A release invocation closes the window early.
	b = &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		Release("w1", "r1", "r", 1, "L1", 1000*ms, 2000*ms).
		Acquire("w2", "a2", "r", 2, "L2", 1400*ms, 1500*ms, 3500*ms)
	expect(t, CheckSafeWindowsDisjoint(b.Recs), Valid, "")
	// A renewal reported later extends the window.
	b = &checkertest.HB{}
	b.Acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 1000*ms)
	b.Recs = append(b.Recs, history.Record{Kind: history.Invoke, Worker: "w1", Op: "x", Type: history.OpWrite, Resource: "r", Lease: "L1", Token: 1, TimeNs: 900 * ms, SafeUntilNs: 2500 * ms})
	b.Acquire("w2", "a2", "r", 2, "L2", 1400*ms, 2000*ms, 3500*ms)
	expect(t, CheckSafeWindowsDisjoint(b.Recs), Invalid, AnomalyOverlappingSafeWindow)
}

func TestLostDuplicatedAndPhantomUpdatesAreCaught(t *testing.T) {
	h := func(final string) []history.Record {
		b := &checkertest.HB{}
		b.Write("w1", "r", "e1", 1, history.OK, 0).
			Write("w2", "r", "e2", 2, history.OK, 10*ms).
			Write("w3", "r", "e3", 1, history.Fail, 20*ms).
			Write("w4", "r", "e4", 3, history.Unknown, 30*ms).
			Read("r", final, 100*ms)
		return b.Recs
	}
	expect(t, CheckFinalRead(h("e1 e2")), Valid, "")
	expect(t, CheckFinalRead(h("e1 e2 e4")), Valid, "") // unknown may have applied
	expect(t, CheckFinalRead(h("e1 e4")), Invalid, AnomalyLostUpdate)
	expect(t, CheckFinalRead(h("e1 e2 e2")), Invalid, AnomalyDuplicatedUpdate)
	expect(t, CheckFinalRead(h("e1 e2 e3")), Invalid, AnomalyPhantomUpdate)
	expect(t, CheckFinalRead(h("e1 e2 zz")), Invalid, AnomalyPhantomUpdate)
	// No final read of a key with acknowledged writes: undecided.
	b := &checkertest.HB{}
	b.Write("w1", "r", "e1", 1, history.OK, 0)
	expect(t, CheckFinalRead(b.Recs), history.Unknown, "")
}

func TestHistoryRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	for _, r := range checkertest.Valid().Recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := history.ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(checkertest.Valid().Recs) || got[3] != checkertest.Valid().Recs[3] {
		t.Fatalf("round trip changed the history: %d records", len(got))
	}
}

func TestNonLinearizableLeaseHistoriesAreCaught(t *testing.T) {
	check := func(l *checkertest.Lin) Result { return CheckLinearizable(l.Recs, 10*time.Second) }
	expect(t, check(&checkertest.Lin{Recs: checkertest.LinValid()}), Valid, "")
	// Two leases at once: l2's grant while l1 holds and never released.
	l := &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").Acquire("l2", "a2", 20*ms, 30*ms, 2, "K2")
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A stale read: the holder read after the release completed.
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").Release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).Read("l2", "g", 40*ms, 50*ms, "K1", 1)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// Held refusal of a free resource.
	l = &checkertest.Lin{}
	l.Held("l1", "a1", 0, 10*ms)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A skipped token: the counter moved without a grant.
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 2, "K1")
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// An unknown acquire may have been granted: a later read sees a holder
	// nobody was told about, and a held refusal is then fine.
	l = &checkertest.Lin{}
	l.Op("l1", "a1", history.OpAcquire, 0, 10*ms, history.Unknown, 0, "", "timeout", "").
		Held("l2", "a2", 20*ms, 30*ms).
		Read("l2", "g", 40*ms, 50*ms, "K9", 1)
	expect(t, check(l), Valid, "")
	// Concurrent acquire and release: either order is fine.
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").
		Release("l1", "r1", 20*ms, 60*ms, "K1", history.OK).
		Acquire("l2", "a2", 30*ms, 50*ms, 2, "K2")
	expect(t, check(l), Valid, "")
	// A renewal accepted after the release completed, and one refused
	// while the lease is held.
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").Release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).Renew("l1", "n1", 40*ms, 50*ms, "K1", history.OK)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").Renew("l1", "n1", 20*ms, 30*ms, "K1", history.Fail)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// No operations: undecided.
	expect(t, CheckLinearizable(nil, time.Second), history.Unknown, "")
}

func TestStaleReleaseOfTheNextHolderIsCaught(t *testing.T) {
	check := func(l *checkertest.Lin) Result { return CheckLinearizable(l.Recs, 10*time.Second) }
	base := func() *checkertest.Lin {
		l := &checkertest.Lin{}
		return l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").Release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).
			Acquire("l2", "a2", 40*ms, 50*ms, 2, "K2").Held("l1", "a3", 60*ms, 70*ms)
	}
	// l1 releases its old lease while l2 holds: refused, as it must be.
	expect(t, check(base().StaleRelease("l1", "s1", 80*ms, 90*ms, "K1", 1, history.NotReleased).Read("l1", "g", 100*ms, 110*ms, "K2", 2)), Valid, "")
	// Accepted, and the next read sees the resource free: l2's lease was
	// released by a worker that did not hold it.
	expect(t, check(base().StaleRelease("l1", "s1", 80*ms, 90*ms, "K1", 1, history.Released).Read("l1", "g", 100*ms, 110*ms, "", 2)), Invalid, AnomalyNotLinearizable)
	// The same when both grants carried one lease id (ids derived from the
	// resource): the token tells the two leases apart.
	l := &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K").Release("l1", "r1", 20*ms, 30*ms, "K", history.OK).
		Acquire("l2", "a2", 40*ms, 50*ms, 2, "K").StaleRelease("l1", "s1", 60*ms, 70*ms, "K", 1, history.Released)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A release of the holder's own lease that says "not released" while
	// it holds (expiry is out of this model) is an anomaly too.
	l = &checkertest.Lin{}
	l.Acquire("l1", "a1", 0, 10*ms, 1, "K1").StaleRelease("l1", "s1", 20*ms, 30*ms, "K1", 1, history.NotReleased)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
}

func TestLeaseIDNamingTwoLeasesIsCaught(t *testing.T) {
	b := checkertest.Valid()
	// A later grant in the scope that reuses the first lease's id.
	b.Event("10.0", "granted", "r", 3, "L1", 400*ms, 400*ms, 2400*ms)
	expect(t, CheckTokensUniqueMonotonic(b.Recs), Invalid, AnomalyLeaseIDReused)
}

func TestLostAcknowledgedRenewalOrReleaseIsCaught(t *testing.T) {
	op := func(typ, op string, value string) []history.Record {
		return []history.Record{
			{Kind: history.Invoke, Worker: "l1", Op: op, Type: typ, Resource: "jl/0", TimeNs: 10 * ms, Lease: "K1", Token: 1},
			{Kind: history.Complete, Worker: "l1", Op: op, Type: typ, Resource: "jl/0", TimeNs: 20 * ms, Result: history.OK, Value: value},
		}
	}
	ev := func(kind string) history.Record {
		return history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpEvent, Event: kind, Resource: "jl/0", Lease: "K1", Token: 1, Position: "5.0"}
	}
	h := append(op(history.OpRenew, "n1", ""), ev("renewed"))
	h = append(append(h, op(history.OpRelease, "r1", "")...), ev("released"))
	expect(t, CheckAcknowledgedDurable(h), Valid, "")
	expect(t, CheckAcknowledgedDurable(op(history.OpRenew, "n1", "")), Invalid, AnomalyAckedRenewLost)
	expect(t, CheckAcknowledgedDurable(op(history.OpRelease, "r1", "")), Invalid, AnomalyAckedReleaseLost)
	expect(t, CheckAcknowledgedDurable(op(history.OpRelease, "r1", history.Released)), Invalid, AnomalyAckedReleaseLost)
	// A release the node answered "not released" promises nothing; an
	// event of another token of the same id does not count.
	expect(t, CheckAcknowledgedDurable(op(history.OpRelease, "r1", history.NotReleased)), history.Unknown, "")
	other := ev("renewed")
	other.Token = 2
	expect(t, CheckAcknowledgedDurable(append(op(history.OpRenew, "n1", ""), other)), Invalid, AnomalyAckedRenewLost)
	// Over a gap in the watch stream: undecided.
	gap := history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpWatchGap, Op: "gap-1"}
	expect(t, CheckAcknowledgedDurable(append(op(history.OpRenew, "n1", ""), gap)), history.Unknown, "")
}

// A linearizable read invoked after the watcher recorded an entry must
// answer from state at that entry's index or later.
func TestReadMissingAWatchedEntryIsCaught(t *testing.T) {
	b := checkertest.Valid()
	l := &checkertest.Lin{}
	// The watcher recorded index 12 at 75 ms; a read invoked at 200 ms
	// answers from index 11.
	l.ReadAt("l3", "l3-g", 200*ms, 210*ms, "", 2, 11)
	b.Recs = append(b.Recs, l.Recs...)
	r := CheckReadsSeeWatched(b.Recs)
	expect(t, r, Invalid, AnomalyReadMissedWatched)
	if !strings.Contains(r.Witness, "l3-g") || !strings.Contains(r.Witness, "13.0") {
		t.Fatalf("witness %q does not name the read and the event", r.Witness)
	}
	// The same read invoked before the watcher recorded index 12 (but
	// after 11.0) is no anomaly: the entry may have committed after it.
	b = checkertest.Valid()
	l = &checkertest.Lin{}
	l.ReadAt("l3", "l3-g", 60*ms, 210*ms, "", 2, 11)
	b.Recs = append(b.Recs, l.Recs...)
	expect(t, CheckReadsSeeWatched(b.Recs), Valid, "")
	// No read with an applied index: nothing to check.
	expect(t, CheckReadsSeeWatched(checkertest.Valid().Recs[:12]), history.Unknown, "")
}
