package jepsen

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

const sec = int64(time.Second)

// probes returns one prober's samples on node: a call every 100 ms from
// from to to (ns), failing inside each of the fail windows.
func probes(node string, from, to int64, fail ...[2]int64) []ProbeSample {
	var out []ProbeSample
	for t := from; t < to; t += sec / 10 {
		s := ProbeSample{Node: node, InvokeNs: t, CompleteNs: t + sec/100, OK: true}
		for _, w := range fail {
			if t >= w[0] && t < w[1] {
				s.OK, s.Error = false, "unavailable"
			}
		}
		out = append(out, s)
	}
	return out
}

func TestUnavailabilityBoundedJudgesOnlyFaultsThatLeaveAQuorum(t *testing.T) {
	pauseLeader := []history.Fault{
		{Phase: "start", Kind: NemPauseLeader, Target: "n1", Leader: true, TimeNs: 10 * sec},
		{Phase: "heal", Kind: NemPauseLeader, Target: "n1", TimeNs: 14 * sec, Effective: true},
	}
	cases := []struct {
		name    string
		samples []ProbeSample
		faults  []history.Fault
		want    string
	}{
		{"no fault, no failure", probes("n2", 0, 20*sec), nil, Valid},
		{"a short failover", append(probes("n2", 0, 20*sec, [2]int64{10 * sec, 11 * sec}), probes("n3", 0, 20*sec)...), pauseLeader, Valid},
		{"a caller waits out its deadline", probes("n2", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), pauseLeader, Invalid},
		{"the prober of the paused node is not judged", probes("n1", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), pauseLeader, Valid},
		{"a partition of the halves is not judged", probes("n2", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), []history.Fault{
			{Phase: "start", Kind: NemPartitionHalves, Target: "n1", TimeNs: 10 * sec},
			{Phase: "heal", Kind: NemPartitionHalves, Target: "n1", TimeNs: 14 * sec},
		}, Valid},
		{"a slow success is unavailability too", []ProbeSample{
			{Node: "n2", InvokeNs: 9 * sec, CompleteNs: 9*sec + 1, OK: true},
			{Node: "n2", InvokeNs: 10 * sec, CompleteNs: 18 * sec, OK: true},
			{Node: "n2", InvokeNs: 18 * sec, CompleteNs: 18*sec + 1, OK: true},
		}, pauseLeader, Invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, ws := CheckUnavailabilityBounded(tc.samples, tc.faults, UnavailabilityBound)
			if r.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s; windows %s", r.Verdict, r.Witness, tc.want, windowsString(ws))
			}
		})
	}
}
