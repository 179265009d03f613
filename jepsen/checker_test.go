package jepsen

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/history"
)

const ms = int64(time.Millisecond)

// hb builds hand-made histories.
type hb struct{ recs []history.Record }

func (b *hb) acquire(worker, op, res string, token uint64, lease string, inv, done, safeUntil int64) *hb {
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: history.OpAcquire, Resource: res, TimeNs: inv},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: history.OpAcquire, Resource: res, TimeNs: done, Result: history.OK, Token: token, Lease: lease, SafeUntilNs: safeUntil})
	return b
}

func (b *hb) release(worker, op, res string, token uint64, lease string, inv, safeUntil int64) *hb {
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: history.OpRelease, Resource: res, TimeNs: inv, Token: token, Lease: lease, SafeUntilNs: safeUntil},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: history.OpRelease, Resource: res, TimeNs: inv + ms, Result: history.OK, Token: token, Lease: lease})
	return b
}

func (b *hb) write(worker, res, elem string, token uint64, result string, at int64) *hb {
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: elem + "-w", Type: history.OpWrite, Resource: res, Element: elem, Token: token, TimeNs: at},
		history.Record{Kind: history.Complete, Worker: worker, Op: elem + "-w", Type: history.OpWrite, Resource: res, Element: elem, Token: token, TimeNs: at + ms, Result: result})
	return b
}

func (b *hb) read(res, value string, at int64) *hb {
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: "final", Op: "final-" + res, Type: history.OpRead, Resource: res, TimeNs: at},
		history.Record{Kind: history.Complete, Worker: "final", Op: "final-" + res, Type: history.OpRead, Resource: res, TimeNs: at + ms, Result: history.OK, Value: value})
	return b
}

func (b *hb) event(pos, ev, res string, token uint64, lease string, now, granted, expires int64) *hb {
	b.recs = append(b.recs, history.Record{Kind: history.Observe, Worker: "watch", Op: pos, Type: history.OpEvent, Position: pos, Event: ev,
		Resource: res, Token: token, Lease: lease, ClusterNow: now, GrantedAt: granted, ExpiresAt: expires, TimeNs: now})
	return b
}

// valid is a clean two-holder history on one resource: A holds token 1,
// writes, releases; B acquires token 2 after, writes, releases; the final
// read has both elements. The cluster's events agree.
func valid() *hb {
	b := &hb{}
	b.acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		write("w1", "r", "e1", 1, history.OK, 20*ms).
		release("w1", "r1", "r", 1, "L1", 100*ms, 2000*ms).
		acquire("w2", "a2", "r", 2, "L2", 150*ms, 160*ms, 2200*ms).
		write("w2", "r", "e2", 2, history.OK, 170*ms).
		release("w2", "r2", "r", 2, "L2", 300*ms, 2200*ms).
		read("r", "e1 e2", 400*ms).
		event("5.0", "granted", "r", 1, "L1", 5*ms, 5*ms, 2005*ms).
		event("6.0", "renewed", "r", 1, "L1", 50*ms, 5*ms, 2050*ms).
		event("7.0", "released", "r", 1, "L1", 101*ms, 5*ms, 2050*ms).
		event("8.0", "granted", "r", 2, "L2", 155*ms, 155*ms, 2155*ms).
		event("9.0", "released", "r", 2, "L2", 301*ms, 155*ms, 2155*ms)
	b.recs = append(b.recs, linValid()...)
	long := int64(5 * time.Minute)
	b.event("10.0", "granted", "jl/0", 1, "K1", 5*ms, 5*ms, long).
		event("10.1", "renewed", "jl/0", 1, "K1", 43*ms, 5*ms, long+38*ms).
		event("11.0", "released", "jl/0", 1, "K1", 55*ms, 5*ms, long+38*ms).
		event("12.0", "granted", "jl/0", 2, "K2", 75*ms, 75*ms, long).
		event("13.0", "released", "jl/0", 2, "K2", 115*ms, 75*ms, long)
	// A reuse of a1's request id with another scope, refused.
	b.recs = append(b.recs,
		history.Record{Kind: history.Invoke, Worker: "w1", Op: "u1", Type: history.OpReuse, Resource: "r", RequestID: "R1", Changed: "scope", TimeNs: 30 * ms},
		history.Record{Kind: history.Complete, Worker: "w1", Op: "u1", Type: history.OpReuse, Resource: "r", RequestID: "R1", Changed: "scope", TimeNs: 31 * ms, Result: history.Fail})
	return b
}

// lin builds records of the linearizability workload on resource jl/0.
type lin struct{ recs []history.Record }

func (l *lin) op(worker, op, typ string, call, ret int64, result string, token uint64, lease, errText string, relLease string) *lin {
	l.recs = append(l.recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: typ, Resource: "jl/0", TimeNs: call, Lease: relLease},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: typ, Resource: "jl/0", TimeNs: ret, Result: result, Token: token, Lease: lease, Error: errText})
	return l
}

func (l *lin) acquire(w, op string, call, ret int64, token uint64, lease string) *lin {
	return l.op(w, op, history.OpAcquire, call, ret, history.OK, token, lease, "", "")
}
func (l *lin) held(w, op string, call, ret int64) *lin {
	return l.op(w, op, history.OpAcquire, call, ret, history.Fail, 0, "", HeldPrefix+"held by x", "")
}
func (l *lin) release(w, op string, call, ret int64, lease, result string) *lin {
	return l.op(w, op, history.OpRelease, call, ret, result, 0, "", "", lease)
}
func (l *lin) renew(w, op string, call, ret int64, lease, result string) *lin {
	return l.op(w, op, history.OpRenew, call, ret, result, 0, "", "", lease)
}
func (l *lin) read(w, op string, call, ret int64, holder string, scopeToken uint64) *lin {
	return l.op(w, op, history.OpRead, call, ret, history.OK, scopeToken, holder, "", "")
}

// linValid: l1 holds token 1, l2 is refused meanwhile, l1 releases, l2
// gets token 2 and a read sees it.
func linValid() []history.Record {
	l := &lin{}
	l.acquire("l1", "l1-a", 0, 10*ms, 1, "K1").
		held("l2", "l2-a", 20*ms, 30*ms).
		read("l2", "l2-g", 31*ms, 40*ms, "K1", 1).
		renew("l1", "l1-n", 41*ms, 45*ms, "K1", history.OK).
		release("l1", "l1-r", 50*ms, 60*ms, "K1", history.OK).
		renew("l1", "l1-m", 61*ms, 65*ms, "K1", history.Fail).
		acquire("l2", "l2-b", 70*ms, 80*ms, 2, "K2").
		read("l1", "l1-g", 90*ms, 100*ms, "K2", 2).
		release("l2", "l2-r", 110*ms, 120*ms, "K2", history.OK)
	return l.recs
}

func validAudit() []fencekv.AuditRecord {
	return []fencekv.AuditRecord{
		{Seq: 1, Op: "append", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 2, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 3, Op: "append", Key: "r", Scope: "r", Token: 2, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 4, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeStale, Fenced: true},
		{Seq: 5, Op: "put", Key: "r", Scope: "r", Token: 2, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 6, Op: "put", Key: "other", Scope: "other", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
	}
}

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
	rs := CheckAll(valid().recs, validAudit(), 300*time.Millisecond)
	for _, r := range rs {
		expect(t, r, Valid, "")
	}
	if p, f := Tally(rs); p != 8 || f != 0 {
		t.Fatalf("tally %d passed %d failed", p, f)
	}
}

func TestStaleWriteAcceptedIsCaught(t *testing.T) {
	audit := append(validAudit(), fencekv.AuditRecord{Seq: 7, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted})
	r := CheckFencedTokensMonotonic(audit, false)
	expect(t, r, Invalid, AnomalyStaleWriteAccepted)
	if !strings.Contains(r.Witness, "#7") {
		t.Fatalf("witness %q does not name the record", r.Witness)
	}
	// Strict mode: an equal token twice is already stale.
	expect(t, CheckFencedTokensMonotonic(validAudit(), true), Invalid, AnomalyStaleWriteAccepted)
	// Nothing accepted: undecided, not a pass.
	expect(t, CheckFencedTokensMonotonic(nil, false), history.Unknown, "")
}

func TestTokenReusedIsCaught(t *testing.T) {
	b := valid()
	// A second lease with token 2 in the same scope (a replayed counter).
	b.acquire("w3", "a3", "r", 2, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckTokensUniqueMonotonic(b.recs), Invalid, AnomalyTokenReused)
	// The same from the cluster's events alone.
	b = valid()
	b.event("10.0", "granted", "r", 1, "L9", 400*ms, 400*ms, 2400*ms)
	expect(t, CheckTokensUniqueMonotonic(b.recs), Invalid, AnomalyTokenReused)
	// Replaying one lease (same id) is no reuse.
	b = valid()
	b.event("10.0", "granted", "r", 2, "L2", 155*ms, 155*ms, 2155*ms)
	expect(t, CheckTokensUniqueMonotonic(b.recs), Valid, "")
}

func TestTokenRegressionAfterFailoverIsCaught(t *testing.T) {
	// After a failover, an acquire invoked after token 5 was acknowledged
	// gets token 3: the new leader's counter went back.
	b := &hb{}
	b.acquire("w1", "a1", "r", 5, "L5", 0, 10*ms, 2000*ms).
		acquire("w2", "a2", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckTokensUniqueMonotonic(b.recs), Invalid, AnomalyTokenRegression)
	// Concurrent acquires may complete in any token order.
	c := &hb{}
	c.acquire("w1", "a1", "r", 5, "L5", 0, 100*ms, 2000*ms).
		acquire("w2", "a2", "r", 4, "L4", 10*ms, 50*ms, 2000*ms)
	expect(t, CheckTokensUniqueMonotonic(c.recs), Valid, "")
}

func TestOverlappingGrantsAreCaught(t *testing.T) {
	b := &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		// Granted before L1's expiry plus the margin (2300 ms), not released.
		event("6.0", "granted", "r", 2, "L2", 2100*ms, 2100*ms, 4100*ms)
	r := CheckGrantIntervals(b.recs, 300*time.Millisecond)
	expect(t, r, Invalid, AnomalyOverlappingGrants)
	// Strictly after the margin it is fine; at exactly expiry + margin the
	// FSM still refuses, so a grant there is an overlap.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("6.0", "granted", "r", 2, "L2", 2300*ms+1, 2300*ms+1, 4300*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Valid, "")
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("6.0", "granted", "r", 2, "L2", 2300*ms, 2300*ms, 4300*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A lease expired before its margin passed, then the resource granted
	// again: both the expiry and the grant are caught (the reviewer's case).
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("6.0", "expired", "r", 1, "L1", 2001*ms, 0, 2000*ms).
		event("6.1", "granted", "r", 2, "L2", 2001*ms, 2001*ms, 4001*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyEarlyExpiry)
	// An expired event does not excuse a grant stamped inside the bound.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("6.0", "expired", "r", 1, "L1", 2301*ms, 0, 2000*ms).
		event("6.1", "granted", "r", 2, "L2", 2301*ms, 2100*ms, 4100*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A proper expiry then grant is valid.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("6.0", "expired", "r", 1, "L1", 2301*ms, 0, 2000*ms).
		event("6.1", "granted", "r", 2, "L2", 2301*ms, 2301*ms, 4301*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Valid, "")
	// Renewals of a released lease, or of a lease after another was
	// granted, must have been refused.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		event("5.2", "renewed", "r", 1, "L1", 600*ms, 0, 2600*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("5.1", "released", "r", 1, "L1", 500*ms, 0, 2000*ms).
		event("5.2", "granted", "r", 2, "L2", 600*ms, 600*ms, 2600*ms).
		event("5.3", "renewed", "r", 1, "L1", 700*ms, 0, 2700*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
	// A renewal extends the lease: a grant within the old bound overlaps.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("5.1", "renewed", "r", 1, "L1", 1000*ms, 0, 3000*ms).
		event("6.0", "granted", "r", 2, "L2", 2500*ms, 2500*ms, 4500*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyOverlappingGrants)
	// A renewal after expiry.
	b = &hb{}
	b.event("5.0", "granted", "r", 1, "L1", 0, 0, 2000*ms).
		event("5.1", "renewed", "r", 1, "L1", 2100*ms, 0, 4100*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyRenewAfterExpiry)
}

func TestLostAcknowledgedGrantIsCaughtOrUnknownOverAGap(t *testing.T) {
	b := valid()
	b.acquire("w3", "a3", "r", 3, "L3", 500*ms, 510*ms, 2500*ms)
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), Invalid, AnomalyAckedGrantMissing)
	b.recs = append(b.recs, history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpWatchGap, Op: "gap-1", Error: "out of range"})
	expect(t, CheckGrantIntervals(b.recs, 300*time.Millisecond), history.Unknown, "")
	// Without any event the checker cannot decide.
	expect(t, CheckGrantIntervals(nil, time.Second), history.Unknown, "")
}

func TestOverlappingSafeWindowsAreCaught(t *testing.T) {
	b := &hb{}
	// A's safe window runs to 2000 ms; it never releases (paused). B gets
	// the lease at 1500 ms: the windows overlap by 500 ms.
	b.acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		acquire("w2", "a2", "r", 2, "L2", 1400*ms, 1500*ms, 3500*ms).
		release("w2", "r2", "r", 2, "L2", 1600*ms, 3500*ms)
	r := CheckSafeWindowsDisjoint(b.recs)
	expect(t, r, Invalid, AnomalyOverlappingSafeWindow)
	if !strings.Contains(r.Witness, "w1") || !strings.Contains(r.Witness, "w2") {
		t.Fatalf("witness %q does not name both holders", r.Witness)
	}
	// A release invocation closes the window early.
	b = &hb{}
	b.acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		release("w1", "r1", "r", 1, "L1", 1000*ms, 2000*ms).
		acquire("w2", "a2", "r", 2, "L2", 1400*ms, 1500*ms, 3500*ms)
	expect(t, CheckSafeWindowsDisjoint(b.recs), Valid, "")
	// A renewal reported later extends the window.
	b = &hb{}
	b.acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 1000*ms)
	b.recs = append(b.recs, history.Record{Kind: history.Invoke, Worker: "w1", Op: "x", Type: history.OpWrite, Resource: "r", Lease: "L1", Token: 1, TimeNs: 900 * ms, SafeUntilNs: 2500 * ms})
	b.acquire("w2", "a2", "r", 2, "L2", 1400*ms, 2000*ms, 3500*ms)
	expect(t, CheckSafeWindowsDisjoint(b.recs), Invalid, AnomalyOverlappingSafeWindow)
}

func TestLostDuplicatedAndPhantomUpdatesAreCaught(t *testing.T) {
	h := func(final string) []history.Record {
		b := &hb{}
		b.write("w1", "r", "e1", 1, history.OK, 0).
			write("w2", "r", "e2", 2, history.OK, 10*ms).
			write("w3", "r", "e3", 1, history.Fail, 20*ms).
			write("w4", "r", "e4", 3, history.Unknown, 30*ms).
			read("r", final, 100*ms)
		return b.recs
	}
	expect(t, CheckFinalRead(h("e1 e2")), Valid, "")
	expect(t, CheckFinalRead(h("e1 e2 e4")), Valid, "") // unknown may have applied
	expect(t, CheckFinalRead(h("e1 e4")), Invalid, AnomalyLostUpdate)
	expect(t, CheckFinalRead(h("e1 e2 e2")), Invalid, AnomalyDuplicatedUpdate)
	expect(t, CheckFinalRead(h("e1 e2 e3")), Invalid, AnomalyPhantomUpdate)
	expect(t, CheckFinalRead(h("e1 e2 zz")), Invalid, AnomalyPhantomUpdate)
	// No final read of a key with acknowledged writes: undecided.
	b := &hb{}
	b.write("w1", "r", "e1", 1, history.OK, 0)
	expect(t, CheckFinalRead(b.recs), history.Unknown, "")
}

func TestHistoryRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	for _, r := range valid().recs {
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
	if len(got) != len(valid().recs) || got[3] != valid().recs[3] {
		t.Fatalf("round trip changed the history: %d records", len(got))
	}
}

func TestParseNemeses(t *testing.T) {
	// "all" is every nemesis but the out-of-spec clock-rate and
	// clock-rate-client-pause, the two restores, and the two drift-edge
	// ones (which set up the whole run).
	if ks, err := ParseNemeses("all"); err != nil || len(ks) != len(AllNemeses)-6 {
		t.Fatal(ks, err)
	}
	if _, err := ParseNemeses("kill,partition"); err == nil {
		t.Fatal("unknown nemesis accepted")
	}
}

func TestNonLinearizableLeaseHistoriesAreCaught(t *testing.T) {
	check := func(l *lin) Result { return CheckLinearizable(l.recs, 10*time.Second) }
	expect(t, check(&lin{recs: linValid()}), Valid, "")
	// Two leases at once: l2's grant while l1 holds and never released.
	l := &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").acquire("l2", "a2", 20*ms, 30*ms, 2, "K2")
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A stale read: the holder read after the release completed.
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).read("l2", "g", 40*ms, 50*ms, "K1", 1)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// Held refusal of a free resource.
	l = &lin{}
	l.held("l1", "a1", 0, 10*ms)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A skipped token: the counter moved without a grant.
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 2, "K1")
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// An unknown acquire may have been granted: a later read sees a holder
	// nobody was told about, and a held refusal is then fine.
	l = &lin{}
	l.op("l1", "a1", history.OpAcquire, 0, 10*ms, history.Unknown, 0, "", "timeout", "").
		held("l2", "a2", 20*ms, 30*ms).
		read("l2", "g", 40*ms, 50*ms, "K9", 1)
	expect(t, check(l), Valid, "")
	// Concurrent acquire and release: either order is fine.
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").
		release("l1", "r1", 20*ms, 60*ms, "K1", history.OK).
		acquire("l2", "a2", 30*ms, 50*ms, 2, "K2")
	expect(t, check(l), Valid, "")
	// A renewal accepted after the release completed, and one refused
	// while the lease is held.
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).renew("l1", "n1", 40*ms, 50*ms, "K1", history.OK)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").renew("l1", "n1", 20*ms, 30*ms, "K1", history.Fail)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// No operations: undecided.
	expect(t, CheckLinearizable(nil, time.Second), history.Unknown, "")
}

func TestReportRenders(t *testing.T) {
	var buf bytes.Buffer
	sum := &Summary{Dir: "x", Results: CheckAll(valid().recs, validAudit(), 300*time.Millisecond)}
	writeReport(&buf, sum, valid().recs, []history.Fault{{Phase: "start", Kind: NemKill, Target: "n1", TimeNs: 20 * ms}, {Phase: "heal", Kind: NemKill, Target: "n1", TimeNs: 90 * ms}}, artifacts{})
	for _, want := range []string{"<svg", "fenced-tokens-monotonic", "kill n1", "token 2"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("report lacks %q", want)
		}
	}
}

// staleRelease is a release through the API of lease (token) that the node
// answered with released (Released or NotReleased).
func (l *lin) staleRelease(w, op string, call, ret int64, lease string, token uint64, released string) *lin {
	l.recs = append(l.recs,
		history.Record{Kind: history.Invoke, Worker: w, Op: op, Type: history.OpRelease, Resource: "jl/0", TimeNs: call, Lease: lease, Token: token},
		history.Record{Kind: history.Complete, Worker: w, Op: op, Type: history.OpRelease, Resource: "jl/0", TimeNs: ret, Result: history.OK, Value: released})
	return l
}

func TestStaleReleaseOfTheNextHolderIsCaught(t *testing.T) {
	check := func(l *lin) Result { return CheckLinearizable(l.recs, 10*time.Second) }
	base := func() *lin {
		l := &lin{}
		return l.acquire("l1", "a1", 0, 10*ms, 1, "K1").release("l1", "r1", 20*ms, 30*ms, "K1", history.OK).
			acquire("l2", "a2", 40*ms, 50*ms, 2, "K2").held("l1", "a3", 60*ms, 70*ms)
	}
	// l1 releases its old lease while l2 holds: refused, as it must be.
	expect(t, check(base().staleRelease("l1", "s1", 80*ms, 90*ms, "K1", 1, NotReleased).read("l1", "g", 100*ms, 110*ms, "K2", 2)), Valid, "")
	// Accepted, and the next read sees the resource free: l2's lease was
	// released by a worker that did not hold it.
	expect(t, check(base().staleRelease("l1", "s1", 80*ms, 90*ms, "K1", 1, Released).read("l1", "g", 100*ms, 110*ms, "", 2)), Invalid, AnomalyNotLinearizable)
	// The same when both grants carried one lease id (ids derived from the
	// resource): the token tells the two leases apart.
	l := &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K").release("l1", "r1", 20*ms, 30*ms, "K", history.OK).
		acquire("l2", "a2", 40*ms, 50*ms, 2, "K").staleRelease("l1", "s1", 60*ms, 70*ms, "K", 1, Released)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
	// A release of the holder's own lease that says "not released" while
	// it holds (expiry is out of this model) is an anomaly too.
	l = &lin{}
	l.acquire("l1", "a1", 0, 10*ms, 1, "K1").staleRelease("l1", "s1", 20*ms, 30*ms, "K1", 1, NotReleased)
	expect(t, check(l), Invalid, AnomalyNotLinearizable)
}

func TestLeaseIDNamingTwoLeasesIsCaught(t *testing.T) {
	b := valid()
	// A later grant in the scope that reuses the first lease's id.
	b.event("10.0", "granted", "r", 3, "L1", 400*ms, 400*ms, 2400*ms)
	expect(t, CheckTokensUniqueMonotonic(b.recs), Invalid, AnomalyLeaseIDReused)
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
	expect(t, CheckAcknowledgedDurable(op(history.OpRelease, "r1", Released)), Invalid, AnomalyAckedReleaseLost)
	// A release the node answered "not released" promises nothing; an
	// event of another token of the same id does not count.
	expect(t, CheckAcknowledgedDurable(op(history.OpRelease, "r1", NotReleased)), history.Unknown, "")
	other := ev("renewed")
	other.Token = 2
	expect(t, CheckAcknowledgedDurable(append(op(history.OpRenew, "n1", ""), other)), Invalid, AnomalyAckedRenewLost)
	// Over a gap in the watch stream: undecided.
	gap := history.Record{Kind: history.Observe, Worker: "watch", Type: history.OpWatchGap, Op: "gap-1"}
	expect(t, CheckAcknowledgedDurable(append(op(history.OpRenew, "n1", ""), gap)), history.Unknown, "")
}
