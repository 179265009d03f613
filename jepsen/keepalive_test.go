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

func TestCheckKeepAliveKept(t *testing.T) {
	s := int64(time.Second)
	ended := kaHold(100*s, 12*time.Second, 10*time.Second/3, 4, 3)
	ended.Result, ended.Error = history.Fail, "lease ended while held: lease lost"
	fault := func(kind string, from, to int64) []history.Fault {
		return []history.Fault{{Phase: "start", Kind: kind, TimeNs: from * s}, {Phase: "heal", Kind: kind, TimeNs: to * s}}
	}
	for _, tc := range []struct {
		name    string
		h       []history.Record
		faults  []history.Fault
		verdict string
	}{
		{"kept without a fault", []history.Record{kaHold(100*s, 12*time.Second, 10*time.Second/3, 4, 1)}, nil, checker.Valid},
		{"kept on a slow disk", []history.Record{kaHold(100*s, 12*time.Second, 10*time.Second/3, 4, 1)}, fault(history.NemSlowDisk, 90, 99), checker.Valid},
		{"ended without a fault", []history.Record{ended}, nil, checker.Invalid},
		{"ended on a slow disk", []history.Record{ended}, fault(history.NemSlowDisk, 90, 99), checker.Invalid},
		{"ended within the settling after a slow disk", []history.Record{ended}, fault(history.NemSlowDisk, 70, 86), checker.Invalid},
		{"ended during a kill: not judged", []history.Record{ended}, fault(history.NemKillLeader, 90, 93), history.Unknown},
		{"ended during a slow disk and a partition: not judged", []history.Record{ended},
			append(fault(history.NemSlowDisk, 80, 95), fault(history.NemPartitionLeader, 96, 98)...), history.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checker.CheckKeepAliveKept(tc.h, tc.faults)
			if r.Verdict != tc.verdict || (tc.verdict == checker.Invalid) != (r.Anomaly == checker.AnomalyKeepAliveLost) {
				t.Fatalf("got %s %s (%s), want %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict)
			}
		})
	}
}

// On slow disks an unknown renewals-bounded (no hold without a fault)
// does not decide the run; what it finds still does, and elsewhere an
// unknown one still counts.
func TestSlowDiskRunsDoNotRequireRenewalsBounded(t *testing.T) {
	rs := []checker.Result{{Checker: checker.NameRenewals, Verdict: history.Unknown}, {Checker: checker.NameRenewals, Verdict: checker.Invalid}}
	checker.MarkRequired([]string{history.NemSlowDisk}, rs)
	if rs[0].NotRequired == "" || rs[1].NotRequired != "" {
		t.Fatalf("slow disk: %+v", rs)
	}
	other := []checker.Result{{Checker: checker.NameRenewals, Verdict: history.Unknown}}
	checker.MarkRequired([]string{history.NemKill}, other)
	if other[0].NotRequired != "" {
		t.Fatalf("kill: %+v", other)
	}
}

// keepalive-leases-kept must decide a run without faults or with slow
// disks alone; with other faults, which it does not judge through, an
// unknown one does not decide the run.
func TestKeepAliveKeptIsRequiredWhereItJudges(t *testing.T) {
	for _, tc := range []struct {
		nemeses  []string
		required bool
	}{{nil, true}, {[]string{history.NemSlowDisk}, true}, {[]string{history.NemSlowDisk, history.NemKillLeader}, false}, {[]string{history.NemPause}, false}} {
		rs := []checker.Result{{Checker: checker.NameKeepAliveKept, Verdict: history.Unknown}, {Checker: checker.NameKeepAliveKept, Verdict: checker.Invalid}}
		checker.MarkRequired(tc.nemeses, rs)
		if (rs[0].NotRequired == "") != tc.required || rs[1].NotRequired != "" {
			t.Errorf("%v: %+v", tc.nemeses, rs)
		}
	}
}
