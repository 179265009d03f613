package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/testcluster"
	"github.com/leasefence/leasefence/transport"
)

// A leader that went silent (a paused process, a frozen VM) while its
// followers' answers to its last heartbeats were on their way must not
// take those answers, delivered after the followers elected a new leader,
// as confirming a linearizable read that arrived after they were sent:
// they say yes to a term the followers have left. The read must fail or
// show what the new leader granted.
//
// The pause is played by the links (Freeze holds every byte to and from
// the old leader, Thaw delivers them in order), and the old leader's
// leader lease is long enough that it does not step down on its own in
// the meantime, as a paused process does not (the test fails if it did, or
// if the read was answered before the thaw). The new leader is elected at
// once with raft's TimeoutNow, as a leadership transfer does.
func TestLeaderConfirmsAReadOnlyWithAnswersSentAfterIt(t *testing.T) {
	const timeout = 3 * time.Second // the old leader's lease outlasts the steps below
	lc := testcluster.NewLocal(t, 3, func(_ int, c *cluster.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = timeout, timeout, timeout
	})
	old := lc.Leader()
	var rest []int
	for i := range lc.Nodes {
		if i != old {
			rest = append(rest, i)
		}
	}
	first := mustAcquire(t, lc.Client(old), "r")
	if _, err := lc.Client(old).Release(testcluster.WithTimeout(t, 5*time.Second), &api.ReleaseRequest{LeaseId: first.Lease.Id}); err != nil {
		t.Fatal(err)
	}

	// The followers answer a heartbeat (raft sends one every [HT/10,
	// HT/5)); the answers wait. Then the old leader goes silent both ways.
	lc.HoldAnswers(old)
	time.Sleep(timeout/5 + 200*time.Millisecond)
	lc.Freeze(old)

	timeoutNow(t, lc.Nodes[rest[0]])
	nl := lc.Leader(rest...)
	second, err := lc.Client(nl).Acquire(testcluster.WithTimeout(t, 5*time.Second), &api.AcquireRequest{
		Resource: "r", Holder: "test", Ttl: durationpb.New(time.Minute),
	})
	if err != nil {
		t.Fatalf("acquire through the new leader: %v", err)
	}
	if !lc.Nodes[old].IsLeader() {
		t.Fatal("the old leader stepped down on its own before the read; the test proves nothing")
	}

	// The read reaches the old leader while it is still silent to its
	// peers; then everything held is delivered.
	type answer struct {
		resp *api.GetResponse
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := lc.Client(old).Get(ctx, &api.GetRequest{Resource: "r"})
		got <- answer{resp, err}
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("the read was answered before the old leader heard from its peers (%v, %v); the test proves nothing", a.resp, a.err)
	default:
	}
	if !lc.Nodes[old].IsLeader() {
		t.Fatal("the old leader stepped down on its own before the thaw; the test proves nothing")
	}
	lc.Thaw()
	a := <-got
	switch {
	case a.err != nil && status.Code(a.err) == codes.Unavailable && strings.Contains(a.err.Error(), "not the leader"):
		t.Logf("the old leader refused the read: %v", a.err)
	case a.err != nil:
		t.Fatalf("the old leader failed the read with %v, want a not-leader refusal", a.err)
	case a.resp.ScopeToken < second.Lease.Token:
		t.Fatalf("the old leader %s answered a linearizable read with scope token %d (node %s); the new leader %s had granted token %d before the read was sent: a stale read",
			lc.Nodes[old].ID(), a.resp.ScopeToken, a.resp.NodeId, lc.Nodes[nl].ID(), second.Lease.Token)
	default:
		t.Logf("the read saw token %d (node %s)", a.resp.ScopeToken, a.resp.NodeId)
	}
}

// timeoutNow sends raft's TimeoutNow to n, which starts an election at
// once, as the target of a leadership transfer does.
func timeoutNow(t *testing.T, n *cluster.Node) {
	t.Helper()
	tr, err := transport.New(transport.Config{
		LocalAddr:   "127.0.0.1:1",
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var resp raft.TimeoutNowResponse
	if err := tr.TimeoutNow(raft.ServerID(n.ID()), raft.ServerAddress(n.Addr()), &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}}, &resp); err != nil {
		t.Fatalf("TimeoutNow to %s: %v", n.ID(), err)
	}
}

// A read has no outcome to be unknown: when the leader confirming it
// loses its leadership first (here it hears from no peer until its leader
// lease runs out and it steps down), the read is refused as sent to a node
// that is not the leader, which a client may retry anywhere, not as an
// indeterminate write (raft answers the pending check with
// ErrLeadershipLost, "leadership lost while committing log").
func TestAReadWhoseLeaderStepsDownIsRefusedAsNotLeader(t *testing.T) {
	lc := testcluster.NewLocal(t, 3, nil)
	old := lc.Leader()
	mustAcquire(t, lc.Client(old), "r")
	lc.Freeze(old)
	defer lc.Thaw()
	_, err := lc.Client(old).Get(testcluster.WithTimeout(t, 10*time.Second), &api.GetRequest{Resource: "r"})
	if err == nil {
		t.Fatal("a leader that heard from no peer answered a linearizable read")
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not the leader") || strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("the read failed with %v, want a not-leader refusal", err)
	}
}
