package cluster

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// holdLeaderWrites makes n's log writer wait, before each batch the
// leader queued, until the returned release is called; entered receives
// once per held batch.
func holdLeaderWrites(t *testing.T, n *Node) (entered <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 16)
	gate := make(chan struct{})
	f := func() {
		select {
		case in <- struct{}{}:
		default:
		}
		<-gate
	}
	n.llog.testBeforeWrite.Store(&f)
	var once sync.Once
	release = func() {
		once.Do(func() {
			n.llog.testBeforeWrite.Store(nil)
			close(gate)
		})
	}
	t.Cleanup(release)
	return in, release
}

func commitIndex(t *testing.T, n *Node) uint64 {
	t.Helper()
	c, err := strconv.ParseUint(n.Raft().Stats()["commit_index"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The leader writes its log while it replicates (leaderlog.go), so raft
// commits an entry that the leader may not hold on disk yet, on the
// strength of a follower's write alone. Held there, the entry must not
// take effect anywhere: the leader neither applies nor answers it, and the
// followers are not told it is committed. Should the leader now lose its
// unsynced write (a power cut), a later leader elected without the
// follower that has the entry would reuse its index: a grant answered or
// applied here would be a token issued twice.
func TestLeaderUnwrittenEntryTakesNoEffectUntilWritten(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	c := tc.client(li)
	if _, err := c.Acquire(ctxT(t), acquireReq("leaderlog/warm", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	tc.waitAllApplied(t)
	before := leader.Raft().LastIndex()

	entered, release := holdLeaderWrites(t, leader)
	answered := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctxT(t), acquireReq("leaderlog/held", 10*time.Second))
		answered <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader never queued the grant")
	}
	// raft records its last index after the store took the entries, so
	// the writer may enter first (CI, 2026-12-03: "last index 5, want
	// above 5").
	var index uint64
	eventually(t, 10*time.Second, "the leader's raft to append the held entry", func() bool {
		index = leader.Raft().LastIndex()
		return index > before
	})
	// raft commits it: the followers hold it on disk.
	eventually(t, 10*time.Second, "the held entry committed by the leader's raft", func() bool {
		return commitIndex(t, leader) >= index
	})
	if d := leader.llog.Durable(); d >= index {
		t.Fatalf("the leader's log is durable to %d while its write of %d is held", d, index)
	}
	// Several commit timeouts (20 ms) pass: followers would learn the
	// commit index within one.
	time.Sleep(10 * tc.cfgs[li].CommitTimeout)
	select {
	case err := <-answered:
		t.Fatalf("the grant was answered (err %v) before the leader held it on disk", err)
	default:
	}
	for i, n := range tc.nodes {
		// The state machine's index: raft's moves when it hands an entry
		// to the state machine, before Apply.
		if got := n.sm.applied.Load(); got >= index {
			t.Errorf("%s (leader %s) applied entry %d (applied %d) before the leader held it on disk", tc.cfgs[i].ID, tc.cfgs[li].ID, index, got)
		}
	}
	if t.Failed() {
		return
	}

	release()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the grant, once written: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the grant was not answered after the leader's write")
	}
	eventually(t, 10*time.Second, "every node applied the entry", func() bool {
		for _, n := range tc.nodes {
			if n.sm.applied.Load() < index {
				return false
			}
		}
		return true
	})
}

// A node that stops leading with entries still queued writes them before
// its log is touched again: a follower acknowledges entries it already
// holds (raft reads them back first), and that acknowledgement must mean
// they are on disk.
func TestLeaderLogDrainsBeforeAFollowerTouchesIt(t *testing.T) {
	dir := t.TempDir()
	_, logs, closeLog, _, err := openStores(dir, LogStoreWAL, dataDirLockWait, testLogger(t, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog.Close()
	l, err := newLeaderLog(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	leading := true
	l.leader = func() bool { return leading }

	gate := make(chan struct{})
	hold := func() { <-gate }
	l.testBeforeWrite.Store(&hold)
	entries := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogNoop}, {Index: 2, Term: 1, Type: raft.LogNoop}}
	if err := l.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := l.GetLog(2, &got); err != nil || got.Index != 2 {
		t.Fatalf("leader reads its queued entry: %v, %+v", err, got)
	}
	if last, _ := l.LastIndex(); last != 2 {
		t.Fatalf("LastIndex %d with two entries queued, want 2", last)
	}
	if d := l.Durable(); d != 0 {
		t.Fatalf("durable %d while the write is held, want 0", d)
	}

	leading = false // stepped down: reads wait for the queue to be written
	read := make(chan error, 1)
	go func() { read <- l.GetLog(2, &raft.Log{}) }()
	select {
	case err := <-read:
		t.Fatalf("a follower read a queued entry (err %v) before it was written", err)
	case <-time.After(100 * time.Millisecond):
	}
	l.testBeforeWrite.Store(nil)
	close(gate)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != 2 {
		t.Fatalf("durable %d after the read, want 2", d)
	}
	if last, _ := logs.LastIndex(); last != 2 {
		t.Fatalf("the store holds up to %d, want 2", last)
	}

	// A deletion of the end lowers the durable index below it.
	if err := l.DeleteRange(2, 2); err != nil {
		t.Fatal(err)
	}
	if d := l.Durable(); d != 1 {
		t.Fatalf("durable %d after the end was deleted, want 1", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.waitDurable(ctx, 2); err == nil {
		t.Fatal("entry 2 reported durable after its deletion")
	}
}

// raft records a snapshot at the last entry it handed the state machine,
// which can be one that Apply never sees (here a barrier) and that the
// leader has not written yet. A snapshot taken then, persisted, would
// outlive a kill that loses the leader's queue: at restart raft would
// append after the snapshot while the log ends before it ("non-monotonic
// log entries", seen in the harness's lose-tail nemesis). The snapshot
// waits for the write.
func TestSnapshotWaitsForTheLeadersWrite(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	entered, release := holdLeaderWrites(t, leader)
	if err := leader.Raft().Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's writer never took the barrier")
	}
	durable := leader.llog.Durable()
	taken := make(chan raft.SnapshotFuture, 1)
	go func() {
		f := leader.Raft().Snapshot()
		_ = f.Error() // waits for the snapshot
		taken <- f
	}()
	select {
	case f := <-taken:
		if err := f.Error(); err == nil {
			meta, _, _ := f.Open()
			t.Fatalf("a snapshot at index %d was taken while the leader's log was durable only to %d", meta.Index, durable)
		}
		t.Fatalf("snapshot: %v", f.Error())
	case <-time.After(300 * time.Millisecond):
	}
	release()
	f := <-taken
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if d := leader.llog.Durable(); meta.Index > d {
		t.Fatalf("snapshot at %d past the durable log (%d)", meta.Index, d)
	}
}

// failedLog is a log whose writes failed.
type failedLog struct{ err error }

func (f failedLog) waitDurable(context.Context, uint64) error { return f.err }
func (f failedLog) drain() error                              { return f.err }

// An entry raft committed but this node could not write is not applied
// here, and its proposer hears that the outcome is unknown (the followers
// raft counted hold it; the next leader may apply it), not that it failed:
// a client told "failed" would drop a lease it may hold.
func TestAnEntryCommittedButNotWrittenIsIndeterminate(t *testing.T) {
	m := newStateMachine(newHub(16), hclog.NewNullLogger(), nil)
	m.durable = failedLog{errors.New("disk on fire")}
	data, err := fsm.EncodeBatch(&fsmpb.Batch{NowNs: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Apply(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: data})
	e, ok := got.(error)
	if !ok || !errors.Is(e, ErrIndeterminate) {
		t.Fatalf("Apply answered %v, want an error wrapping ErrIndeterminate", got)
	}
	if m.applied.Load() != 0 {
		t.Fatalf("applied %d, want nothing applied", m.applied.Load())
	}
}
