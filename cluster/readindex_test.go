package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

// peerAcks counts a voter only for an acceptance, in the leader's term, of
// a request sent at or after the read arrived; a late answer from an older
// term does not replace a newer one; a refusal or an answer from another
// term is not an acceptance.
func TestPeerAcksConfirmOnlyWithFreshAcceptances(t *testing.T) {
	a := newPeerAcks()
	t0 := time.Now()
	ok := func(term uint64) (*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) {
		return &raft.AppendEntriesRequest{Term: term}, &raft.AppendEntriesResponse{Term: term, Success: true}
	}
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Suffrage: raft.Voter}, {ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Voter}, {ID: "n4", Suffrage: raft.Nonvoter},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	ls := &leaderState{term: 5, ctx: ctx, cancel: cancel}
	confirm := func(arrived time.Time, d time.Duration) error {
		c, stop := context.WithTimeout(context.Background(), d)
		defer stop()
		return a.confirm(c, ls, arrived, cfg, "n1", nil)
	}

	req, resp := ok(5)
	a.record("n2", t0.Add(-time.Millisecond), req, resp) // sent before the read
	a.record("n4", t0.Add(time.Millisecond), req, resp)  // not a voter
	refusedReq, refused := ok(5)
	refused.Success = false
	a.record("n3", t0.Add(time.Millisecond), refusedReq, refused)
	newerReq, newer := ok(5)
	newer.Term = 6 // a refusal from a newer term, flagged as success
	a.record("n3", t0.Add(time.Millisecond), newerReq, newer)
	if err := confirm(t0, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("confirmed with no fresh acceptance from a voter: %v", err)
	}

	// A fresh acceptance wakes the wait.
	done := make(chan error, 1)
	go func() { done <- confirm(t0, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	a.record("n3", t0.Add(2*time.Millisecond), req, resp)
	if err := <-done; err != nil {
		t.Fatalf("a quorum (n1, n3) accepted after the read arrived: %v", err)
	}

	// A late answer from term 4, sent later, does not replace n3's.
	oldReq, oldResp := ok(4)
	a.record("n3", t0.Add(3*time.Millisecond), oldReq, oldResp)
	if err := confirm(t0, 50*time.Millisecond); err != nil {
		t.Fatalf("an older term's late answer replaced a newer acceptance: %v", err)
	}

	// The term ends: the wait ends with it.
	go func() { done <- confirm(t0.Add(time.Hour), 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, errLeadershipEnded) {
		t.Fatalf("after the term ended: %v, want errLeadershipEnded", err)
	}
}

// A linearizable read must reflect every entry committed before it
// arrived. raft counts an entry in its applied index when it hands it to
// the state machine's goroutine, before the state machine applied it (and
// a leader that writes while it replicates applies only once its own log
// holds the entry): a read that accepted raft's index answered from state
// without the entry. A watcher on a follower that had applied the grant
// then read "no lease" from the leader. The hook holds the leader's apply
// of a committed grant; the read must wait for it.
func TestAReadWaitsForTheStateMachineNotRaftsAppliedIndex(t *testing.T) {
	early, idx := readWhileApplyHeld(t, nil, 300*time.Millisecond)
	if early != nil && (early.Lease == nil || early.AppliedIndex < idx) {
		t.Fatalf("a linearizable read answered from state at index %d (lease %v), without entry %d committed before it arrived", early.AppliedIndex, early.Lease, idx)
	}
}

// A read's state can go back after the read waited for its index: a node
// that stepped down may install an older snapshot whose later entries its
// log still holds (Restore takes it, raft applies them again). The read
// must not answer from that state; it answered "no lease" for a grant
// committed before it arrived. Here the rewind is forced on the leader
// (where it cannot happen by itself) between the wait and the copy; the
// read, and the backup, must refuse.
func TestAReadDoesNotAnswerFromAStateRewoundAfterItWaited(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, n := tc.leader()
	cl := tc.client(li)
	ctx := ctxT(t)

	snap, err := n.sm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var old bufSink
	if err := snap.Persist(&old); err != nil {
		t.Fatal(err)
	}
	g, err := cl.Acquire(ctx, &api.AcquireRequest{Resource: "ri/rewound", Holder: "a", Ttl: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	rewind := func() {
		if err := n.sm.Restore(io.NopCloser(bytes.NewReader(old.Bytes()))); err != nil {
			t.Error(err)
		}
	}
	n.sm.testBeforeRead.Store(&rewind)
	t.Cleanup(func() { n.sm.testBeforeRead.Store(nil) })

	r, err := cl.Get(ctx, &api.GetRequest{Resource: "ri/rewound"})
	if err == nil {
		t.Fatalf("a linearizable read answered from state at index %d (lease %v) after it waited for the grant at token %d", r.AppliedIndex, r.Lease, g.Lease.Token)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the read failed with %v, want a not-leader refusal", err)
	}
	up, err := tc.admin(li).Snapshot(ctx, &api.SnapshotRequest{})
	if err == nil {
		_, err = up.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a backup over the rewound state: %v, want a not-leader refusal", err)
	}
}

// A read whose commit index is a barrier or no-op after the state's last
// command answers, from that state (no command is missing), at once: it
// must not wait for the next command, nor take the state's index below
// the commit index for a rewind.
func TestAReadAfterOnlyABarrierAnswersFromTheLastCommand(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.Tick = 30 * time.Second })
	li, n := tc.leader()
	cl := tc.client(li)
	ctx := ctxT(t)
	if _, err := cl.Acquire(ctx, &api.AcquireRequest{Resource: "ri/barrier", Holder: "a", Ttl: durationpb.New(20 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := n.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	content := n.sm.index.Load()
	if commit := n.raft.CommitIndex(); commit <= content {
		t.Fatalf("commit index %d, state's index %d: the barrier should be the last entry", commit, content)
	}
	// A read that waited for the next command would run into ctx (20 s,
	// below the 30 s tick) or answer at a later index.
	r, err := cl.Get(ctx, &api.GetRequest{Resource: "ri/barrier"})
	if err != nil {
		t.Fatalf("a read after a barrier: %v", err)
	}
	if r.Lease == nil || r.AppliedIndex != content {
		t.Fatalf("the read answered at index %d (lease %v), want the grant at %d", r.AppliedIndex, r.Lease, content)
	}
}

// heldApply stops raft's FSM goroutine once, where a test's apply hook
// calls hold: reached gets the index held, release lets it go on (also
// at cleanup, before the nodes close: raft waits for its FSM goroutine).
type heldApply struct {
	reached chan uint64
	resume  chan struct{}
	once    sync.Once
}

func newHeldApply(t *testing.T) *heldApply {
	h := &heldApply{reached: make(chan uint64, 1), resume: make(chan struct{})}
	t.Cleanup(h.release)
	return h
}

func (h *heldApply) hold(index uint64) {
	h.reached <- index
	<-h.resume
}

func (h *heldApply) release() { h.once.Do(func() { close(h.resume) }) }

// readWhileApplyHeld holds the leader's apply of a committed grant (raft
// has counted it as applied) and reads the resource linearizably at the
// leader. It returns the read's answer if it came within window while the
// apply was held (nil when it waited; then it must show the grant once
// released), and the held entry's index.
func readWhileApplyHeld(t *testing.T, tweak func(*Config), window time.Duration) (early *api.GetResponse, idx uint64) {
	t.Helper()
	tc := newTestCluster(t, 3, tweak)
	li, n := tc.leader()
	cl := tc.client(li)
	ctx := ctxT(t)

	held := newHeldApply(t)
	armed := true
	hook := func(l *raft.Log) {
		if !armed || !bytes.Contains(l.Data, []byte("ri/held")) { // armed: raft's FSM goroutine only
			return
		}
		armed = false
		held.hold(l.Index)
	}
	n.sm.testBeforeApply.Store(&hook)
	t.Cleanup(func() { n.sm.testBeforeApply.Store(nil) })
	acquired := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, &api.AcquireRequest{Resource: "ri/held", Holder: "a", Ttl: durationpb.New(10 * time.Second), RequestId: "ri-1"})
		acquired <- err
	}()
	select {
	case idx = <-held.reached:
	case <-ctx.Done():
		t.Fatal("the apply hook was never reached")
	}
	eventually(t, 5*time.Second, "raft counts the held entry as applied", func() bool { return n.raft.AppliedIndex() >= idx })

	type got struct {
		r   *api.GetResponse
		err error
	}
	read := make(chan got, 1)
	go func() {
		r, err := cl.Get(ctx, &api.GetRequest{Resource: "ri/held"})
		read <- got{r, err}
	}()
	select {
	case g := <-read:
		if g.err != nil {
			t.Fatal(g.err)
		}
		early = g.r
	case <-time.After(window):
	}
	held.release()
	if early == nil {
		select {
		case g := <-read:
			if g.err != nil {
				t.Fatal(g.err)
			}
			if g.r.Lease == nil || g.r.AppliedIndex < idx {
				t.Fatalf("the read answered from state at index %d (lease %v) after entry %d applied", g.r.AppliedIndex, g.r.Lease, idx)
			}
		case <-ctx.Done():
			t.Fatal("the read never answered after the entry applied")
		}
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	return early, idx
}
