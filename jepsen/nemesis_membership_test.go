package jepsen

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/checker/checkertest"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// memberFault is a member-unreachable fault from 10 s to 16 s whose adds
// were answered as given.
func memberFault(out history.MembershipOutcome) []history.Fault {
	return []history.Fault{
		{Phase: "start", Kind: history.NemMemberUnreachable, Target: "n1", Leader: true, TimeNs: 10 * sec},
		{Phase: "heal", Kind: history.NemMemberUnreachable, Target: "n1", TimeNs: 16 * sec, Effective: true, Membership: &out},
	}
}

func refusedAdds(n int) []history.MemberAdd {
	var out []history.MemberAdd
	for i := 0; i < n; i++ {
		out = append(out, history.MemberAdd{ID: "u1-" + string(rune('1'+i)), Addr: "127.0.0.1:4000" + string(rune('1'+i)), Answer: history.AddRefused, TookNs: 2 * sec})
	}
	return out
}

// allProbes is a prober per node of a 3-node cluster, every call served
// but inside the fail windows.
func allProbes(fail ...[2]int64) []history.ProbeSample {
	var out []history.ProbeSample
	for _, node := range []string{"n1", "n2", "n3"} {
		out = append(out, checkertest.Probes(node, 0, 30*sec, fail...)...)
	}
	return out
}

func TestCheckMembershipKeepsQuorum(t *testing.T) {
	added := refusedAdds(3)
	added[0].Answer = history.AddAdded
	cases := []struct {
		name    string
		samples []history.ProbeSample
		faults  []history.Fault
		want    string
		anomaly string
	}{
		{"every add refused, the cluster serves", allProbes(), memberFault(history.MembershipOutcome{Adds: refusedAdds(3)}), checker.Valid, ""},
		{"a short hiccup is within the bound", allProbes([2]int64{11 * sec, 12 * sec}), memberFault(history.MembershipOutcome{Adds: refusedAdds(2)}), checker.Valid, ""},
		{"an unreachable voter added", allProbes(), memberFault(history.MembershipOutcome{Adds: added}), checker.Invalid, checker.AnomalyUnreachableVoter},
		{"a node lists an unreachable voter (the add's answer was lost)", allProbes(), memberFault(history.MembershipOutcome{
			Adds:   []history.MemberAdd{{ID: "u1-1", Addr: "127.0.0.1:40001", Answer: history.AddError, Error: "deadline exceeded"}, refusedAdds(1)[0]},
			Voters: []string{"n2: u1-1 at 127.0.0.1:40001"}}), checker.Invalid, checker.AnomalyUnreachableVoter},
		{"an unreachable member left after the heal", allProbes(), memberFault(history.MembershipOutcome{Adds: refusedAdds(1),
			Left: []string{"n3: u1-1 at 127.0.0.1:40001"}}), checker.Invalid, checker.AnomalyUnreachableKept},
		{"quorum lost: no caller served from the third add on", allProbes([2]int64{14 * sec, 30 * sec}),
			memberFault(history.MembershipOutcome{Adds: refusedAdds(3)}), checker.Invalid, checker.AnomalyUnavailableMemberChange},
		{"unavailability after the heal counts too", allProbes([2]int64{17 * sec, 21 * sec}),
			memberFault(history.MembershipOutcome{Adds: refusedAdds(1)}), checker.Invalid, checker.AnomalyUnavailableMemberChange},
		{"a window that overlaps another fault is not judged", allProbes([2]int64{14 * sec, 21 * sec}),
			append(memberFault(history.MembershipOutcome{Adds: refusedAdds(1)}),
				history.Fault{Phase: "start", Kind: history.NemPartitionHalves, Target: "n2", TimeNs: 18 * sec},
				history.Fault{Phase: "heal", Kind: history.NemPartitionHalves, Target: "n2", TimeNs: 20 * sec}), checker.Valid, ""},
		{"no fault: nothing checked", allProbes(), nil, history.Unknown, ""},
		{"no add answered and no window: nothing checked", allProbes(), memberFault(history.MembershipOutcome{
			Adds: []history.MemberAdd{{ID: "u1-1", Addr: "127.0.0.1:40001", Answer: history.AddError, Error: "no leader"}}}), history.Unknown, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := checker.CheckMembershipKeepsQuorum(tc.samples, tc.faults, checker.UnavailabilityBound)
			if r.Verdict != tc.want || r.Anomaly != tc.anomaly {
				t.Fatalf("got %v, want %s %s", r, tc.want, tc.anomaly)
			}
		})
	}
}

// FreeAddrs hands out distinct loopback addresses that refuse a
// connection.
func TestFreeAddrsRefuseConnections(t *testing.T) {
	addrs, err := FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("addresses %v", addrs)
		}
		seen[a] = true
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Fatalf("something listens at %s", a)
		}
	}
}

func TestMemberUnreachableIsInSpec(t *testing.T) {
	ks, err := nm.ParseNemeses("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k == history.NemMemberUnreachable {
			return
		}
	}
	t.Fatalf("%s not in \"all\": %v", history.NemMemberUnreachable, ks)
}
