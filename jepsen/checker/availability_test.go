package checker

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
)

const sec = int64(time.Second)

func TestUnavailabilityBoundedJudgesOnlyFaultsThatLeaveAQuorum(t *testing.T) {
	pauseLeader := []history.Fault{
		{Phase: "start", Kind: history.NemPauseLeader, Target: "n1", Leader: true, TimeNs: 10 * sec},
		{Phase: "heal", Kind: history.NemPauseLeader, Target: "n1", TimeNs: 14 * sec, Effective: true},
	}
	cases := []struct {
		name    string
		samples []history.ProbeSample
		faults  []history.Fault
		want    string
	}{
		{"no fault, no failure", checkertest.Probes("n2", 0, 20*sec), nil, Valid},
		{"a short failover", append(checkertest.Probes("n2", 0, 20*sec, [2]int64{10 * sec, 11 * sec}), checkertest.Probes("n3", 0, 20*sec)...), pauseLeader, Valid},
		{"a caller waits out its deadline", checkertest.Probes("n2", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), pauseLeader, Invalid},
		{"the prober of the paused node is not judged", checkertest.Probes("n1", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), pauseLeader, Valid},
		{"a partition of the halves is not judged", checkertest.Probes("n2", 0, 20*sec, [2]int64{10 * sec, 15 * sec}), []history.Fault{
			{Phase: "start", Kind: history.NemPartitionHalves, Target: "n1", TimeNs: 10 * sec},
			{Phase: "heal", Kind: history.NemPartitionHalves, Target: "n1", TimeNs: 14 * sec},
		}, Valid},
		{"a slow success is unavailability too", []history.ProbeSample{
			{Node: "n2", InvokeNs: 9 * sec, CompleteNs: 9*sec + 1, OK: true},
			{Node: "n2", InvokeNs: 10 * sec, CompleteNs: 18 * sec, OK: true},
			{Node: "n2", InvokeNs: 18 * sec, CompleteNs: 18*sec + 1, OK: true},
		}, pauseLeader, Invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, ws := CheckUnavailabilityBounded(tc.samples, tc.faults, UnavailabilityBound)
			if r.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s; windows %s", r.Verdict, r.Witness, tc.want, WindowsString(ws))
			}
		})
	}
}
