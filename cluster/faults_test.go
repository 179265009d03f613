package cluster

// Behaviour across faults a node lives through: a leader change under a
// retried request id and under waiting acquirers, watchers resuming on
// another node, clock steps, a corrupt log entry, a node that lags past a
// snapshot.

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

func TestDuplicateRequestIDAcrossLeaderChangeYieldsOneLease(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	req := acquireReq("dedup", 30*time.Second)
	req.RequestId = "req-7f3a"
	r1, err := tc.client(0).Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	li, leader := tc.leader()
	if _, err := leader.admin.TransferLeadership(ctx, &api.TransferLeadershipRequest{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "new leader", func() bool {
		for i, n := range tc.nodes {
			if i != li && n.IsLeader() {
				return true
			}
		}
		return false
	})
	for i := range tc.nodes {
		r2, err := tc.client(i).Acquire(ctx, req)
		if err != nil {
			t.Fatalf("retry via n%d: %v", i+1, err)
		}
		if !r2.Replayed || string(r2.Lease.Id) != string(r1.Lease.Id) || r2.Lease.Token != r1.Lease.Token {
			t.Fatalf("retry via n%d gave another lease: %+v vs %+v", i+1, r2.Lease, r1.Lease)
		}
	}
	g, err := tc.client(2).Get(ctx, &api.GetRequest{Resource: "dedup"})
	if err != nil || g.ScopeToken != 1 {
		t.Fatalf("a retry issued a second token: %v %v", g, err)
	}
}

func TestWaitingAcquirersAreServedInArrivalOrder(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	c := tc.client(0)
	first, err := c.Acquire(ctx, acquireReq("fifo", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, leader := tc.leader()
	const n = 4
	type got struct {
		who   int
		lease *api.Lease
	}
	results := make(chan got, n)
	cancelled, cancelSkipped := context.WithCancel(ctx)
	for i := 0; i < n; i++ {
		wctx := ctx
		if i == 1 {
			wctx = cancelled // this waiter leaves the queue before its turn
		}
		go func(i int, wctx context.Context) {
			req := acquireReq("fifo", 30*time.Second)
			req.Wait = true
			r, err := c.Acquire(wctx, req)
			if err != nil {
				results <- got{who: i}
				return
			}
			results <- got{who: i, lease: r.Lease}
		}(i, wctx)
		// Arrival order is the order the leader queued them.
		eventually(t, 5*time.Second, "waiter queued", func() bool { return leader.waiters.waiting("fifo") == i+1 })
	}
	cancelSkipped()
	if g := <-results; g.who != 1 || g.lease != nil {
		t.Fatalf("cancelled waiter: %+v", g)
	}
	prev := first.Lease
	for _, want := range []int{0, 2, 3} {
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: prev.Id}); err != nil {
			t.Fatal(err)
		}
		g := <-results
		if g.who != want || g.lease == nil {
			t.Fatalf("want waiter %d to get the lease next, got %+v", want, g)
		}
		if g.lease.Token <= prev.Token {
			t.Fatalf("token %d not above %d", g.lease.Token, prev.Token)
		}
		prev = g.lease
	}
}

func TestWaitingAcquirerGetsLeaseWhenHolderExpires(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	c := tc.client(1)
	first, err := c.Acquire(ctx, acquireReq("exp", 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	req := acquireReq("exp", 10*time.Second)
	req.Wait = true
	r, err := c.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lease.Token != first.Lease.Token+1 {
		t.Fatalf("token %d after expiry of %d", r.Lease.Token, first.Lease.Token)
	}
	if r.Lease.GrantedAtNs <= first.Lease.ExpiresAtNs+int64(tc.cfgs[0].SkewMargin) {
		t.Fatalf("granted at %d, before expiry %d + margin", r.Lease.GrantedAtNs, first.Lease.ExpiresAtNs)
	}
}

// collect reads events from a watch stream until it has n or fails.
func collect(t *testing.T, s api.LeaseService_WatchClient, n int) []*api.WatchEvent {
	t.Helper()
	var out []*api.WatchEvent
	for len(out) < n {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("watch recv after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
	return out
}

func TestWatchResumesOnAnotherNodeWithoutGapsOrRepeats(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	s, err := tc.client(0).Watch(wctx, &api.WatchRequest{Key: "w/", Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	c := tc.client(2)
	var ids [][]byte
	for i := 0; i < 3; i++ {
		r, err := c.Acquire(ctx, acquireReq("w/"+string(rune('a'+i)), 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Lease.Id)
	}
	if _, err := c.Acquire(ctx, acquireReq("other", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, 3)
	stopWatch()
	// Three more changes while nobody watches.
	for _, id := range ids {
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: id}); err != nil {
			t.Fatal(err)
		}
	}
	last := got[len(got)-1].Position
	s2, err := tc.client(1).Watch(ctx, &api.WatchRequest{Key: "w/", Prefix: true, After: last})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, collect(t, s2, 3)...)
	want := []api.EventType{1, 1, 1, 3, 3, 3}
	for i, ev := range got {
		if ev.Type != want[i] || ev.Lease.Resource != "w/"+string(rune('a'+i%3)) {
			t.Fatalf("event %d: %v %s", i, ev.Type, ev.Lease.Resource)
		}
		if i > 0 && !(position{got[i-1].Position.Index, got[i-1].Position.Seq}).less(position{ev.Position.Index, ev.Position.Seq}) {
			t.Fatalf("positions not increasing at %d", i)
		}
	}
}

func TestWatchFromCompactedPositionIsOutOfRange(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.WatchBuffer = 16 })
	ctx := ctxT(t)
	c := tc.client(0)
	for i := 0; i < 20; i++ {
		r, err := c.Acquire(ctx, acquireReq("cmp", 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Watch(ctx, &api.WatchRequest{Key: "cmp", After: &api.Position{Index: 1}})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("want OutOfRange, got %v", err)
	}
}

func TestClockStepsOnAnyNodeChangeNoLease(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	li, leader := tc.leader()
	r, err := tc.client(li).Acquire(ctx, acquireReq("clk", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Step every follower's clock by an hour, one forward, one backward:
	// a follower's clock reading means nothing to the cluster.
	steps := []time.Duration{time.Hour, -time.Hour}
	var target int
	for i := range tc.nodes {
		if i != li {
			tc.clocks[i].Step(steps[0])
			steps = steps[1:]
			target = i
		}
	}
	// Hand leadership to a stepped node: it rebases on the last applied
	// cluster time, so the lease is neither expired nor refreshed.
	if _, err := leader.admin.TransferLeadership(ctx, &api.TransferLeadershipRequest{Id: tc.cfgs[target].ID}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "stepped node leads", func() bool { return tc.nodes[target].IsLeader() })
	rn, err := tc.client(target).Renew(ctx, &api.RenewRequest{LeaseId: r.Lease.Id})
	if err != nil {
		t.Fatalf("renew after leader change to a stepped clock: %v", err)
	}
	// Renewal sets expires_at = now + ttl: cluster time moved by about the
	// real time elapsed, not by an hour either way.
	moved := time.Duration(rn.Lease.ExpiresAtNs - r.Lease.ExpiresAtNs)
	if moved < 0 || moved > 10*time.Second {
		t.Fatalf("cluster time moved by %v across the leader change", moved)
	}
}

func TestCorruptLogEntryStopsEveryNodeWithoutPanic(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	// Bypass the proposer: write garbage straight into the Raft log, as a
	// buggy or newer leader might.
	f := leader.raft.Apply([]byte{0x01, 0xff, 0xff, 0xff}, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if err, ok := f.Response().(error); !ok || err == nil {
		t.Fatalf("apply response: %v", f.Response())
	}
	// Every node that reaches the entry stops; a node that never learns it
	// is committed cannot form a quorum with the stopped ones, so the
	// cluster as a whole stops serving rather than diverge.
	if !errors.Is(leader.Err(), ErrFailed) {
		eventually(t, 10*time.Second, "leader stops", func() bool { return errors.Is(leader.Err(), ErrFailed) })
	}
	eventually(t, 20*time.Second, "a majority stops", func() bool {
		failed := 0
		for _, n := range tc.nodes {
			if errors.Is(n.Err(), ErrFailed) {
				failed++
			}
		}
		return failed >= 2
	})
	for _, n := range tc.nodes {
		if n.Err() == nil && n.IsLeader() {
			t.Fatalf("%s leads after the corrupt entry", n.ID())
		}
	}
}

func TestLaggingNodeCatchesUpThroughSnapshotAndTokensContinue(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.SnapshotThreshold, c.SnapshotThresholdMax = 10, 10
		c.TrailingLogs = 10
		c.SnapshotInterval = 100 * time.Millisecond
	})
	ctx := ctxT(t)
	li, _ := tc.leader()
	down := (li + 1) % 3
	tc.stop(down)
	up := (li + 2) % 3
	c := tc.client(li)
	var last uint64
	for i := 0; i < 120; i++ {
		r, err := c.Acquire(ctx, acquireReq("snap", 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Lease.Token
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
			t.Fatal(err)
		}
	}
	_, leader := tc.leader()
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Logf("explicit snapshot: %v", err) // raft may have just taken one
	}
	tc.start(down)
	eventually(t, 20*time.Second, "lagging node applies the snapshot", func() bool {
		return tc.nodes[down].AppliedIndex() >= leader.AppliedIndex()-1
	})
	// Now only the restored node and one other remain: the restored node's
	// state must carry the counter.
	tc.stop(up)
	eventually(t, 20*time.Second, "leader among the remaining two", func() bool {
		return tc.nodes[li] != nil && tc.nodes[li].IsLeader() || tc.nodes[down].IsLeader()
	})
	tc.stop(li)
	tc.start(up)
	tc.leader()
	r, err := tc.client(down).Acquire(ctx, acquireReq("snap", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Lease.Token != last+1 {
		t.Fatalf("token after snapshot install: %d, want %d", r.Lease.Token, last+1)
	}
}

var _ = io.EOF
var _ sync.Mutex

// A command the leader committed but could not apply (its state machine
// stopped at an earlier entry) may still take effect on a replica that
// applies it: its outcome is unknown, not a definite failure, and the
// answer carries the request id to resolve it with. It was Internal
// ("node failed"), which a caller could read as nothing done.
func TestACommittedEntryTheLeaderCannotApplyIsIndeterminate(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	ctx := ctxT(t)
	stopped := errors.New("an earlier entry could not be applied")
	n.sm.failed.Store(&stopped)
	req := acquireReq("fail/r", 10*time.Second)
	req.RequestId = "fail-1"
	_, err := tc.client(0).Acquire(ctx, req)
	if id, ok := indeterminate(err); !ok || id != "fail-1" {
		t.Fatalf("acquire committed but not applied: %v, want INDETERMINATE with request id fail-1", err)
	}
}
