package jepsen

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

func kaHold(end int64, held, interval time.Duration, renewals, streams int) history.Record {
	return history.Record{Kind: history.Complete, Worker: "k1", Op: "k1-1-k", Type: checker.OpKeepAlive, Resource: KeepAlivePrefix + "0", Result: history.OK,
		Value: "00112233", TimeNs: end, HeldNs: int64(held), IntervalNs: int64(interval), Renewals: renewals, Streams: streams}
}

func TestCheckRenewalsBounded(t *testing.T) {
	s := int64(time.Second)
	for _, tc := range []struct {
		name    string
		h       []history.Record
		faults  []history.Fault
		verdict string
		anomaly string
	}{
		{"ideal", []history.Record{kaHold(100*s, 30*time.Second, 10*time.Second, 3, 1)}, nil, checker.Valid, ""},
		{"within the slack", []history.Record{kaHold(100*s, 10*time.Second, 10*time.Second/3, 4, 1)}, nil, checker.Valid, ""},
		{"each renewal sent twice", []history.Record{kaHold(100*s, 10*time.Second, 10*time.Second/3, 6, 1)}, nil, checker.Invalid, checker.AnomalyTooManyRenewals},
		{"stream reopened", []history.Record{kaHold(100*s, 10*time.Second, 10*time.Second/3, 3, 4)}, nil, checker.Invalid, checker.AnomalyStreamChurn},
		{"a fault during the hold excuses it", []history.Record{kaHold(100*s, 10*time.Second, 10*time.Second/3, 6, 4)},
			[]history.Fault{{Phase: "start", Kind: history.NemKill, Target: "n1", TimeNs: 95 * s}, {Phase: "heal", Kind: history.NemKill, Target: "n1", TimeNs: 97 * s}}, history.Unknown, ""},
		{"a fault outside the hold does not", []history.Record{kaHold(100*s, 10*time.Second, 10*time.Second/3, 6, 1)},
			[]history.Fault{{Phase: "start", Kind: history.NemKill, Target: "n1", TimeNs: 80 * s}, {Phase: "heal", Kind: history.NemKill, Target: "n1", TimeNs: 85 * s}}, checker.Invalid, checker.AnomalyTooManyRenewals},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checker.CheckRenewalsBounded(tc.h, tc.faults)
			if r.Verdict != tc.verdict || r.Anomaly != tc.anomaly {
				t.Fatalf("got %s %s (%s), want %s %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict, tc.anomaly)
			}
		})
	}
}
