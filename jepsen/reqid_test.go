package jepsen

import "testing"

// requestIDHistory is one acquire of r under request id R (lease L1), then
// the reuses given.
func requestIDHistory(reuses ...Record) []Record {
	h := []Record{
		{Kind: Invoke, Worker: "w1", Op: "a", Type: OpAcquire, Resource: "r", RequestID: "R", TimeNs: 1},
		{Kind: Complete, Worker: "w1", Op: "a", Type: OpAcquire, Resource: "r", RequestID: "R", TimeNs: 2, Result: OK, Token: 1, Lease: "L1"},
	}
	for i, r := range reuses {
		r.Worker, r.Type, r.RequestID, r.TimeNs = "w1", OpReuse, "R", int64(10+2*i)
		inv := r
		inv.Kind, inv.Result, inv.Value, inv.Token = Invoke, "", "", 0
		r.Kind = Complete
		h = append(h, inv, r)
	}
	return h
}

func TestRequestIDCheckerCatchesReplaysAcrossParametersAndSecondGrants(t *testing.T) {
	cases := []struct {
		name    string
		h       []Record
		verdict string
		anomaly string
	}{
		{"refused reuses", requestIDHistory(
			Record{Op: "u1", Changed: "scope", Result: Fail},
			Record{Op: "u2", Changed: "ttl", Result: Fail},
			Record{Op: "d1", Result: Fail},                        // ended
			Record{Op: "d2", Result: OK, Value: "L1", Token: 1},   // replayed while live
			Record{Op: "u3", Changed: "holder", Result: Unknown}), // undecided: not held against it
			Valid, ""},
		{"replay across a scope", requestIDHistory(Record{Op: "u1", Changed: "scope", Result: OK, Value: "L1", Token: 1}),
			Invalid, AnomalyReplayAcrossParams},
		{"a duplicate granted afresh", requestIDHistory(Record{Op: "d1", Result: OK, Value: "L2", Token: 2}),
			Invalid, AnomalySecondGrantForRequest},
		{"two acquires, two leases", append(requestIDHistory(),
			Record{Kind: Complete, Worker: "w2", Op: "b", Type: OpAcquire, Resource: "r", RequestID: "R", TimeNs: 5, Result: OK, Token: 2, Lease: "L2"}),
			Invalid, AnomalySecondGrantForRequest},
		{"nothing reused", requestIDHistory(), Unknown, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckRequestIDs(tc.h)
			if r.Verdict != tc.verdict || r.Anomaly != tc.anomaly {
				t.Fatalf("got %s %s (%s), want %s %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict, tc.anomaly)
			}
		})
	}
}
