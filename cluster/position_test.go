package cluster

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// A Get or a backup taken while an entry has been applied to the state but
// its index not yet recorded as applied (the hook holds apply there) must
// report the index of the content it returns: a watcher resuming from the
// Get's position must not be sent again the grant the Get already showed.
// (Reporting the applied counter put the position one entry behind the
// content, and the resumed watch replayed the grant.)
func TestGetAndBackupReportTheirContentsPosition(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	cl := tc.client(0)
	ctx := ctxT(t)

	held := newHeldApply(t)
	armed := true
	hook := func(index uint64) {
		if !armed { // armed is only touched on raft's FSM goroutine
			return
		}
		granted := false
		n.sm.read(func(st *fsm.State) { _, granted = st.Lease("pos/r") })
		if !granted {
			return // a tick: not the grant's entry
		}
		armed = false
		held.hold(index)
	}
	type acq struct {
		r   *api.AcquireResponse
		err error
	}
	done := make(chan acq, 1)
	n.sm.testAfterPublish.Store(&hook)
	go func() {
		r, err := cl.Acquire(ctx, &api.AcquireRequest{Resource: "pos/r", Holder: "a", Ttl: durationpb.New(10 * time.Second), RequestId: "pos-1"})
		done <- acq{r, err}
	}()
	var idx uint64
	select {
	case idx = <-held.reached:
	case <-ctx.Done():
		t.Fatal("the apply hook was never reached")
	}
	var windowPos uint64 // what a Get in the window told its caller
	for _, stale := range []bool{true, false} {
		g, err := cl.Get(ctx, &api.GetRequest{Resource: "pos/r", Stale: stale})
		if err != nil {
			t.Fatal(err)
		}
		if g.Lease == nil {
			t.Fatalf("Get (stale %v) in the window does not show the grant", stale)
		}
		windowPos = g.AppliedIndex
		if g.AppliedIndex != idx {
			t.Errorf("Get (stale %v) reflects entry %d but reports position %d", stale, idx, g.AppliedIndex)
		}
	}
	_, backupIdx, err := ReadBackup(saveBackup(t, tc, 0))
	if err != nil {
		t.Fatal(err)
	}
	held.release()
	n.sm.testAfterPublish.Store(nil)
	if backupIdx != idx {
		t.Errorf("backup holds entry %d but reports index %d", idx, backupIdx)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	// Resume a watch from the position the Get in the window reported,
	// then release: the first event must be the release, not the grant the
	// Get already showed.
	w, err := cl.Watch(ctx, &api.WatchRequest{Key: "pos/r", After: &api.Position{Index: windowPos, Seq: ^uint32(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, &api.ReleaseRequest{LeaseId: a.r.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != api.EventType_EVENT_TYPE_RELEASED {
		t.Fatalf("watch resumed from the Get's position %d replayed %v at %v", windowPos, ev.Type, ev.Position)
	}
}

// A stale Get says it is stale and which node's state, at which applied
// index, answered; a linearizable one, answered by the leader, says it is
// not.
func TestStaleGetSaysItIsStaleWithNodeAndIndex(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	li, leader := tc.leader()
	fi, follower := tc.follower()
	if _, err := tc.client(li).Acquire(ctx, &api.AcquireRequest{Resource: "stale/r", Holder: "a", Ttl: durationpb.New(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	index := func(n *Node) uint64 {
		var i uint64
		n.sm.read(func(*fsm.State) { i = n.sm.index.Load() })
		return i
	}
	before := index(follower)
	g, err := tc.client(fi).Get(ctx, &api.GetRequest{Resource: "stale/r", Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	after := index(follower)
	if !g.Stale || g.NodeId != tc.cfgs[fi].ID || g.AppliedIndex < before || g.AppliedIndex > after {
		t.Fatalf("stale get from %s: stale %v, node %q, index %d (follower at %d..%d)", tc.cfgs[fi].ID, g.Stale, g.NodeId, g.AppliedIndex, before, after)
	}
	g, err = tc.client(fi).Get(ctx, &api.GetRequest{Resource: "stale/r"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Stale || g.NodeId != tc.cfgs[li].ID || g.Lease == nil || g.AppliedIndex > index(leader) {
		t.Fatalf("linearizable get through %s: stale %v, node %q (leader %s), lease %v, index %d", tc.cfgs[fi].ID, g.Stale, g.NodeId, tc.cfgs[li].ID, g.Lease, g.AppliedIndex)
	}
}
