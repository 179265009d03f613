package jepsen

import (
	"testing"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// requestIDHistory is one acquire of r under request id R (lease L1), then
// the reuses given.
func requestIDHistory(reuses ...history.Record) []history.Record {
	h := []history.Record{
		{Kind: history.Invoke, Worker: "w1", Op: "a", Type: history.OpAcquire, Resource: "r", RequestID: "R", TimeNs: 1},
		{Kind: history.Complete, Worker: "w1", Op: "a", Type: history.OpAcquire, Resource: "r", RequestID: "R", TimeNs: 2, Result: history.OK, Token: 1, Lease: "L1"},
	}
	for i, r := range reuses {
		r.Worker, r.Type, r.RequestID, r.TimeNs = "w1", history.OpReuse, "R", int64(10+2*i)
		inv := r
		inv.Kind, inv.Result, inv.Value, inv.Token = history.Invoke, "", "", 0
		r.Kind = history.Complete
		h = append(h, inv, r)
	}
	return h
}

func TestRequestIDCheckerCatchesReplaysAcrossParametersAndSecondGrants(t *testing.T) {
	cases := []struct {
		name    string
		h       []history.Record
		verdict string
		anomaly string
	}{
		{"refused reuses", requestIDHistory(
			history.Record{Op: "u1", Changed: "scope", Result: history.Fail},
			history.Record{Op: "u2", Changed: "ttl", Result: history.Fail},
			history.Record{Op: "d1", Result: history.Fail},                        // ended
			history.Record{Op: "d2", Result: history.OK, Value: "L1", Token: 1},   // replayed while live
			history.Record{Op: "u3", Changed: "holder", Result: history.Unknown}), // undecided: not held against it
			checker.Valid, ""},
		{"replay across a scope", requestIDHistory(history.Record{Op: "u1", Changed: "scope", Result: history.OK, Value: "L1", Token: 1}),
			checker.Invalid, checker.AnomalyReplayAcrossParams},
		{"a duplicate granted afresh", requestIDHistory(history.Record{Op: "d1", Result: history.OK, Value: "L2", Token: 2}),
			checker.Invalid, checker.AnomalySecondGrantForRequest},
		{"two acquires, two leases", append(requestIDHistory(),
			history.Record{Kind: history.Complete, Worker: "w2", Op: "b", Type: history.OpAcquire, Resource: "r", RequestID: "R", TimeNs: 5, Result: history.OK, Token: 2, Lease: "L2"}),
			checker.Invalid, checker.AnomalySecondGrantForRequest},
		{"nothing reused", requestIDHistory(), history.Unknown, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := checker.CheckRequestIDs(tc.h)
			if r.Verdict != tc.verdict || r.Anomaly != tc.anomaly {
				t.Fatalf("got %s %s (%s), want %s %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict, tc.anomaly)
			}
		})
	}
}
