package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

func members(t *testing.T, n *Node) []*api.Member {
	t.Helper()
	st, err := n.admin.Status(ctxT(t), &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.Members
}

// Join validates the new member's id like a node id at start, and its
// address as host:port; a refusal changes nothing.
func TestJoinRefusesBadIDsAndAddresses(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	_, leader := tc.leader()
	okAddr := freeAddrs(t, 1)[0]
	for name, req := range map[string]*api.JoinRequest{
		"1 MB id":          {Id: strings.Repeat("x", 1<<20), Addr: okAddr},
		"NUL in the id":    {Id: "n\x004", Addr: okAddr},
		"control in id":    {Id: "n\x1b4", Addr: okAddr},
		"comma in the id":  {Id: "n4,n5", Addr: okAddr},
		"= in the id":      {Id: "n4=x", Addr: okAddr},
		"space in the id":  {Id: "n 4", Addr: okAddr},
		"bidi in the id":   {Id: "n\u202e4", Addr: okAddr},
		"not an address":   {Id: "n4", Addr: "not-an-address"},
		"no port":          {Id: "n4", Addr: "127.0.0.1:"},
		"no host":          {Id: "n4", Addr: ":7001"},
		"port too large":   {Id: "n4", Addr: "127.0.0.1:99999"},
		"port not numeric": {Id: "n4", Addr: "127.0.0.1:http"},
		"NUL in address":   {Id: "n4", Addr: "127.0.0.1\x00:7001"},
		"1 MB address":     {Id: "n4", Addr: strings.Repeat("a", 1<<20) + ":7001"},
	} {
		_, err := leader.admin.Join(ctxT(t), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if got := len(members(t, leader)); got != 1 {
		t.Fatalf("refused joins changed membership: %d members", got)
	}
}

// Three adds of addresses where nothing listens (issue 14 §3: they left 6
// voters, 3 unreachable, and a cluster that could not even remove them)
// are refused, quickly, and the cluster keeps serving.
func TestAddsOfUnreachableMembersAreRefusedAndTheClusterServes(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	for i, addr := range freeAddrs(t, 3) {
		for _, nonvoter := range []bool{false, true} {
			start := time.Now()
			_, err := leader.admin.Join(ctxT(t), &api.JoinRequest{Id: "x" + string(rune('1'+i)), Addr: addr, Nonvoter: nonvoter})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "answer") {
				t.Fatalf("add of unreachable %s (nonvoter %v): %v, want FailedPrecondition", addr, nonvoter, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("refusal took %v", d)
			}
		}
	}
	if got := len(members(t, leader)); got != 3 {
		t.Fatalf("%d members after refused adds", got)
	}
	// Still serving, through a follower too (forwarding).
	fi, _ := tc.follower()
	if _, err := tc.client(fi).Acquire(ctxT(t), acquireReq("after-adds", 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// Leadership cannot go to a non-voter: refused up front with a clear
// error instead of a transfer that cannot succeed.
func TestTransferLeadershipToANonvoterIsRefused(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	addr := freeAddrs(t, 1)[0]
	cfg := tc.cfgs[0]
	cfg.ID, cfg.Listen, cfg.DataDir, cfg.Bootstrap, cfg.Join, cfg.Nonvoter = "n4", addr, t.TempDir(), nil, tc.cfgs[1].Listen, true
	cfg.Clock, cfg.Logger = NewManualClock(), testLogger(t, "n4")
	n4, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	_, leader := tc.leader()
	eventually(t, 15*time.Second, "n4 a non-voter", func() bool {
		for _, m := range members(t, leader) {
			if m.Id == "n4" && m.Suffrage == "nonvoter" {
				return true
			}
		}
		return false
	})
	_, err = leader.admin.TransferLeadership(ctxT(t), &api.TransferLeadershipRequest{Id: "n4"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "non-voter") {
		t.Fatalf("transfer to a non-voter: %v", err)
	}
	if !leader.IsLeader() {
		t.Fatal("the refused transfer moved leadership")
	}
}

// A voter is added only if the voters that answer, the new one counted,
// still form a quorum of the new configuration (the leader's view of the
// configuration given here: itself and three voters that do not answer).
func TestAddIsRefusedWhenAnsweringVotersWouldNotFormAQuorum(t *testing.T) {
	tc := newTestCluster(t, 2, nil)
	li, leader := tc.leader()
	other := tc.cfgs[1-li]
	dead := freeAddrs(t, 3)
	servers := []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(leader.ID()), Address: raft.ServerAddress(leader.Addr())}}
	for i, a := range dead {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("d%d", i)), Address: raft.ServerAddress(a)})
	}
	// 5 voters after the add, 2 answer (the leader, the new one): refused.
	err := leader.checkAdd(ctxT(t), other.ID, other.Listen, false, servers)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "quorum") {
		t.Fatalf("add with 3 of 4 voters silent: %v", err)
	}
	// A non-voter does not count for the quorum: it only has to answer.
	if err := leader.checkAdd(ctxT(t), other.ID, other.Listen, true, servers); err != nil {
		t.Fatalf("non-voter add: %v", err)
	}
	// One voter silent of two: 3 voters after the add, 2 answer, a quorum.
	if err := leader.checkAdd(ctxT(t), other.ID, other.Listen, false, servers[:2]); err != nil {
		t.Fatalf("add with 1 of 2 voters silent: %v", err)
	}
}

// The leader's join probe asked only whether something answered Status at
// the address, so a node of another cluster was added as a voter (under
// any id): a member that refuses every Raft RPC of this cluster, one
// failure less it survives (reviewer). The node answering must be the one
// named, and of this cluster (or of none yet).
func TestAMemberOfAnotherClusterIsNeverAdded(t *testing.T) {
	ctx := ctxT(t)
	a := newTestCluster(t, 3, nil)
	b := newTestCluster(t, 1, func(c *Config) { c.ID, c.Bootstrap = "n4", map[string]string{"n4": c.Listen} })
	li, leader := a.leader()
	before := len(leader.raft.GetConfiguration().Configuration().Servers)
	for _, tc := range []struct{ id, want string }{
		{"b1", `is "n4", not "b1"`},                            // another node than the one named
		{"n4", "belongs to cluster " + b.nodes[0].ClusterID()}, // the one named, of another cluster
	} {
		_, err := a.admin(li).Join(ctx, &api.JoinRequest{Id: tc.id, Addr: b.nodes[0].Addr()})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("join %s at another cluster's node: %v, want FailedPrecondition saying %q", tc.id, err, tc.want)
		}
	}
	if after := len(leader.raft.GetConfiguration().Configuration().Servers); after != before {
		t.Fatalf("the configuration went from %d to %d servers", before, after)
	}
}
