// Package checkertest holds hand-made histories for the tests of the
// checkers and of what reads their results (the report, the run).
package checkertest

import (
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/history"
)

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

// HB builds hand-made histories.
type HB struct{ Recs []history.Record }

func (b *HB) Acquire(worker, op, res string, token uint64, lease string, inv, done, safeUntil int64) *HB {
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: history.OpAcquire, Resource: res, TimeNs: inv},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: history.OpAcquire, Resource: res, TimeNs: done, Result: history.OK, Token: token, Lease: lease, SafeUntilNs: safeUntil})
	return b
}

func (b *HB) Release(worker, op, res string, token uint64, lease string, inv, safeUntil int64) *HB {
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: history.OpRelease, Resource: res, TimeNs: inv, Token: token, Lease: lease, SafeUntilNs: safeUntil},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: history.OpRelease, Resource: res, TimeNs: inv + ms, Result: history.OK, Token: token, Lease: lease})
	return b
}

func (b *HB) Write(worker, res, elem string, token uint64, result string, at int64) *HB {
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: elem + "-w", Type: history.OpWrite, Resource: res, Element: elem, Token: token, TimeNs: at},
		history.Record{Kind: history.Complete, Worker: worker, Op: elem + "-w", Type: history.OpWrite, Resource: res, Element: elem, Token: token, TimeNs: at + ms, Result: result})
	return b
}

func (b *HB) Read(res, value string, at int64) *HB {
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: "final", Op: "final-" + res, Type: history.OpRead, Resource: res, TimeNs: at},
		history.Record{Kind: history.Complete, Worker: "final", Op: "final-" + res, Type: history.OpRead, Resource: res, TimeNs: at + ms, Result: history.OK, Value: value})
	return b
}

func (b *HB) Event(pos, ev, res string, token uint64, lease string, now, granted, expires int64) *HB {
	b.Recs = append(b.Recs, history.Record{Kind: history.Observe, Worker: "watch", Op: pos, Type: history.OpEvent, Position: pos, Event: ev,
		Resource: res, Token: token, Lease: lease, ClusterNow: now, GrantedAt: granted, ExpiresAt: expires, TimeNs: now})
	return b
}

// Valid is a clean two-holder history on one resource: A holds token 1,
// writes, releases; B acquires token 2 after, writes, releases; the final
// read has both elements. The cluster's events agree.
func Valid() *HB {
	b := &HB{}
	b.Acquire("w1", "a1", "r", 1, "L1", 0, 10*ms, 2000*ms).
		Write("w1", "r", "e1", 1, history.OK, 20*ms).
		Release("w1", "r1", "r", 1, "L1", 100*ms, 2000*ms).
		Acquire("w2", "a2", "r", 2, "L2", 150*ms, 160*ms, 2200*ms).
		Write("w2", "r", "e2", 2, history.OK, 170*ms).
		Release("w2", "r2", "r", 2, "L2", 300*ms, 2200*ms).
		Read("r", "e1 e2", 400*ms).
		Event("5.0", "granted", "r", 1, "L1", 5*ms, 5*ms, 2005*ms).
		Event("6.0", "renewed", "r", 1, "L1", 50*ms, 5*ms, 2050*ms).
		Event("7.0", "released", "r", 1, "L1", 101*ms, 5*ms, 2050*ms).
		Event("8.0", "granted", "r", 2, "L2", 155*ms, 155*ms, 2155*ms).
		Event("9.0", "released", "r", 2, "L2", 301*ms, 155*ms, 2155*ms)
	b.Recs = append(b.Recs, LinValid()...)
	long := int64(5 * time.Minute)
	b.Event("10.0", "granted", "jl/0", 1, "K1", 5*ms, 5*ms, long).
		Event("10.1", "renewed", "jl/0", 1, "K1", 43*ms, 5*ms, long+38*ms).
		Event("11.0", "released", "jl/0", 1, "K1", 55*ms, 5*ms, long+38*ms).
		Event("12.0", "granted", "jl/0", 2, "K2", 75*ms, 75*ms, long).
		Event("13.0", "released", "jl/0", 2, "K2", 115*ms, 75*ms, long)
	// A reuse of a1's request id with another scope, refused.
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: "w1", Op: "u1", Type: history.OpReuse, Resource: "r", RequestID: "R1", Changed: "scope", TimeNs: 30 * ms},
		history.Record{Kind: history.Complete, Worker: "w1", Op: "u1", Type: history.OpReuse, Resource: "r", RequestID: "R1", Changed: "scope", TimeNs: 31 * ms, Result: history.Fail})
	return b
}

// Lin builds records of the linearizability workload on resource jl/0.
type Lin struct{ Recs []history.Record }

func (l *Lin) Op(worker, op, typ string, call, ret int64, result string, token uint64, lease, errText string, relLease string) *Lin {
	l.Recs = append(l.Recs,
		history.Record{Kind: history.Invoke, Worker: worker, Op: op, Type: typ, Resource: "jl/0", TimeNs: call, Lease: relLease},
		history.Record{Kind: history.Complete, Worker: worker, Op: op, Type: typ, Resource: "jl/0", TimeNs: ret, Result: result, Token: token, Lease: lease, Error: errText})
	return l
}

func (l *Lin) Acquire(w, op string, call, ret int64, token uint64, lease string) *Lin {
	return l.Op(w, op, history.OpAcquire, call, ret, history.OK, token, lease, "", "")
}
func (l *Lin) Held(w, op string, call, ret int64) *Lin {
	return l.Op(w, op, history.OpAcquire, call, ret, history.Fail, 0, "", history.HeldPrefix+"held by x", "")
}
func (l *Lin) Release(w, op string, call, ret int64, lease, result string) *Lin {
	return l.Op(w, op, history.OpRelease, call, ret, result, 0, "", "", lease)
}
func (l *Lin) Renew(w, op string, call, ret int64, lease, result string) *Lin {
	return l.Op(w, op, history.OpRenew, call, ret, result, 0, "", "", lease)
}
func (l *Lin) Read(w, op string, call, ret int64, holder string, scopeToken uint64) *Lin {
	return l.Op(w, op, history.OpRead, call, ret, history.OK, scopeToken, holder, "", "")
}

// ReadAt is Read answered from state at applied index idx.
func (l *Lin) ReadAt(w, op string, call, ret int64, holder string, scopeToken, idx uint64) *Lin {
	l.Read(w, op, call, ret, holder, scopeToken)
	l.Recs[len(l.Recs)-1].AppliedIndex = idx
	return l
}

// LinValid: l1 holds token 1, l2 is refused meanwhile, l1 releases, l2
// gets token 2 and a read sees it. The reads' applied indexes cover the
// events Valid has the watcher record before them.
func LinValid() []history.Record {
	l := &Lin{}
	l.Acquire("l1", "l1-a", 0, 10*ms, 1, "K1").
		Held("l2", "l2-a", 20*ms, 30*ms).
		ReadAt("l2", "l2-g", 31*ms, 40*ms, "K1", 1, 10).
		Renew("l1", "l1-n", 41*ms, 45*ms, "K1", history.OK).
		Release("l1", "l1-r", 50*ms, 60*ms, "K1", history.OK).
		Renew("l1", "l1-m", 61*ms, 65*ms, "K1", history.Fail).
		Acquire("l2", "l2-b", 70*ms, 80*ms, 2, "K2").
		ReadAt("l1", "l1-g", 90*ms, 100*ms, "K2", 2, 12).
		Release("l2", "l2-r", 110*ms, 120*ms, "K2", history.OK)
	return l.Recs
}

func ValidAudit() []fencekv.AuditRecord {
	return []fencekv.AuditRecord{
		{Seq: 1, Op: "append", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 2, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 3, Op: "append", Key: "r", Scope: "r", Token: 2, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 4, Op: "put", Key: "r", Scope: "r", Token: 1, Outcome: fencekv.OutcomeStale, Fenced: true},
		{Seq: 5, Op: "put", Key: "r", Scope: "r", Token: 2, Outcome: fencekv.OutcomeAccepted, Fenced: true},
		{Seq: 6, Op: "put", Key: "other", Scope: "other", Token: 1, Outcome: fencekv.OutcomeAccepted, Fenced: true},
	}
}

// StaleRelease is a release through the API of lease (token) that the node
// answered with released (Released or NotReleased).
func (l *Lin) StaleRelease(w, op string, call, ret int64, lease string, token uint64, released string) *Lin {
	l.Recs = append(l.Recs,
		history.Record{Kind: history.Invoke, Worker: w, Op: op, Type: history.OpRelease, Resource: "jl/0", TimeNs: call, Lease: lease, Token: token},
		history.Record{Kind: history.Complete, Worker: w, Op: op, Type: history.OpRelease, Resource: "jl/0", TimeNs: ret, Result: history.OK, Value: released})
	return l
}

// Probes returns one prober's samples on node: a call every 100 ms from
// from to to (ns), failing inside each of the fail windows.
func Probes(node string, from, to int64, fail ...[2]int64) []history.ProbeSample {
	var out []history.ProbeSample
	for t := from; t < to; t += sec / 10 {
		s := history.ProbeSample{Node: node, InvokeNs: t, CompleteNs: t + sec/100, OK: true}
		for _, w := range fail {
			if t >= w[0] && t < w[1] {
				s.OK, s.Error = false, "unavailable"
			}
		}
		out = append(out, s)
	}
	return out
}

// ReportHistory is Valid() with an unknown write, a refused write, a
// second linearizability resource and a fault that is never healed: every
// kind of mark the plots draw.
func ReportHistory() ([]history.Record, []history.Fault) {
	b := Valid()
	b.Write("w1", "r", "e3", 1, history.Fail, 180*ms)
	b.Recs = append(b.Recs,
		history.Record{Kind: history.Invoke, Worker: "w3", Op: "e4-w", Type: history.OpWrite, Resource: "r2", Element: "e4", TimeNs: 200 * ms},
		history.Record{Kind: history.Complete, Worker: "w3", Op: "e4-w", Type: history.OpWrite, Resource: "r2", Element: "e4", TimeNs: 1500 * ms, Result: history.Unknown, Error: "timeout"})
	for _, r := range LinValid() {
		r.Resource = "jl/1"
		r.TimeNs += 1200 * ms
		b.Recs = append(b.Recs, r)
	}
	faults := []history.Fault{
		{Phase: "start", Kind: history.NemKillLeader, Target: "n1", Leader: true, TimeNs: 20 * ms},
		{Phase: "heal", Kind: history.NemKillLeader, Target: "n1", TimeNs: 90 * ms, Effective: true, Detail: "restarted"},
		{Phase: "start", Kind: history.NemPartitionHalves, Target: "n2|n1,n3", TimeNs: 1100 * ms},
	}
	return b.Recs, faults
}
