package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// errLogClosed is what waiters on the leader's log get once it is closed.
var errLogClosed = fmt.Errorf("%w: its raft log is closed", ErrStopped)

// leaderLog lets the leader write its Raft log while it replicates it
// (Raft thesis §10.2.1, as etcd does). hashicorp/raft writes the leader's
// log before it hands entries to the replicators, so each commit paid the
// leader's synced write and then a follower's, in series. Here a leader's
// StoreLogs queues the entries and returns; one goroutine writes them (as
// one batch with whatever queued meanwhile) while raft replicates.
//
// Raft then counts the leader in a quorum for an entry it may not hold
// durably yet, so three rules keep every effect on entries that a
// majority holds on disk (DESIGN.md, "What is checked" 3):
//
//  1. the state machine applies an entry only once this node's log holds
//     it durably (stateMachine.Apply waits on waitDurable): nothing the
//     leader answers, publishes or snapshots rests on its unwritten log;
//  2. the leader tells followers a commit index no higher than its durable
//     one (transport.Config.CommitLimit): a follower applies an entry only
//     once the leader and a quorum counted with it hold it on disk;
//  3. a node that is not the leader writes in order and synchronously, and
//     before anything else touches its log (a write, a deletion, a read of
//     an entry still queued, which raft does before it acknowledges
//     entries it already has) it waits for the queue to be written: an
//     acknowledgement never covers an entry still in memory, also just
//     after this node stepped down.
//
// A failed write stops the node (onFail): the queue cannot be taken back
// from raft, which already counted it.
type leaderLog struct {
	raft.LogStore // the log cache over the checked store

	raft   atomic.Pointer[raft.Raft] // set once raft runs; nil: write synchronously
	onFail func(error)               // set before raft runs
	leader func() bool               // tests only: whether to queue, in place of raft's state

	// testBeforeWrite, when set (tests only), runs on the writer before it
	// writes a batch the leader queued.
	testBeforeWrite atomic.Pointer[func()]

	wmu sync.Mutex // held over every call that writes the store below

	mu      sync.Mutex
	queue   []*raft.Log // queued by the leader, not yet taken by the writer
	writing []*raft.Log // taken by the writer, being written
	// durable: every entry the log holds at or below this index is
	// written. Changed under mu (with a signal); read without it on the
	// hot paths (each AppendEntries sent, each entry applied).
	durable atomic.Uint64
	err     error         // a failed write, or errLogClosed: nothing more is written
	closed  bool          // close has begun: kick is closed
	changed chan struct{} // closed and replaced when durable, writing or err change
	kick    chan struct{} // one buffered wake-up for the writer; closed by close
	done    chan struct{} // closed when the writer has stopped
}

// newLeaderLog wraps store, whose entries up to its last index are on
// disk, and starts the writer.
func newLeaderLog(store raft.LogStore) (*leaderLog, error) {
	last, err := store.LastIndex()
	if err != nil {
		return nil, err
	}
	l := &leaderLog{LogStore: store, changed: make(chan struct{}),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	l.durable.Store(last)
	go l.loop()
	return l, nil
}

func (l *leaderLog) isLeader() bool {
	if l.leader != nil {
		return l.leader()
	}
	r := l.raft.Load()
	return r != nil && r.State() == raft.Leader
}

// StoreLogs implements raft.LogStore. raft calls it from its own
// goroutine, which is also the one that changes its state: on the leader
// the entries are queued, elsewhere written before it returns.
func (l *leaderLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	if l.isLeader() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return l.err
		}
		if l.closed {
			return errLogClosed
		}
		l.queue = append(l.queue, logs...)
		select {
		case l.kick <- struct{}{}:
		default: // a wake-up is pending: the writer takes these with it
		}
		return nil
	}
	if err := l.drain(); err != nil {
		return err
	}
	l.wmu.Lock()
	err := l.LogStore.StoreLogs(logs)
	l.wmu.Unlock()
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.advance(logs[len(logs)-1].Index)
	l.mu.Unlock()
	return nil
}

// StoreLog implements raft.LogStore.
func (l *leaderLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// GetLog implements raft.LogStore: a queued entry from the queue (on the
// leader), else from the store once the queue is written.
func (l *leaderLog) GetLog(index uint64, log *raft.Log) error {
	l.mu.Lock()
	queued := l.find(index)
	l.mu.Unlock()
	if queued == nil {
		return l.LogStore.GetLog(index, log)
	}
	if l.isLeader() {
		*log = *queued
		return nil
	}
	if err := l.drain(); err != nil {
		return err
	}
	return l.LogStore.GetLog(index, log)
}

// find returns the queued or writing entry at index, or nil; l.mu held.
func (l *leaderLog) find(index uint64) *raft.Log {
	for _, q := range [][]*raft.Log{l.writing, l.queue} {
		if n := len(q); n > 0 && index >= q[0].Index && index <= q[n-1].Index {
			// raft hands over consecutive indexes.
			if off := index - q[0].Index; off < uint64(n) && q[off].Index == index {
				return q[off]
			}
		}
	}
	return nil
}

// FirstIndex implements raft.LogStore.
func (l *leaderLog) FirstIndex() (uint64, error) {
	first, err := l.LogStore.FirstIndex()
	if err != nil || first != 0 {
		return first, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queuedFirst(), nil
}

// LastIndex implements raft.LogStore.
func (l *leaderLog) LastIndex() (uint64, error) {
	l.mu.Lock()
	last := l.queuedLast()
	l.mu.Unlock()
	stored, err := l.LogStore.LastIndex()
	return max(last, stored), err
}

// DeleteRange implements raft.LogStore. A deletion that reaches what is
// queued waits for it to be written; one of older entries (the leader
// compacting after a snapshot) does not. A deletion of the log's end
// lowers the durable index below it: the entries written there next are
// new ones. Not below what the store kept: raft-wal keeps the entries
// past an installed snapshot that raft asked it to delete (walstore.go),
// and raft applies them again; an index lowered below them would hold
// those applies until the next write, and a Close in between for ever.
func (l *leaderLog) DeleteRange(min, max uint64) error {
	l.mu.Lock()
	first := l.queuedFirst()
	l.mu.Unlock()
	if first != 0 && max >= first {
		if err := l.drain(); err != nil {
			return err
		}
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	last, err := l.LogStore.LastIndex()
	if err != nil {
		return err
	}
	if err := l.LogStore.DeleteRange(min, max); err != nil {
		return err
	}
	if max >= last && min > 0 {
		kept, err := l.LogStore.LastIndex()
		if err != nil {
			return err
		}
		to := min - 1
		if kept > to {
			to = kept
		}
		l.mu.Lock()
		if l.durable.Load() > to {
			l.durable.Store(to)
			l.signal()
		}
		l.mu.Unlock()
	}
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore for the store below.
func (l *leaderLog) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// Durable returns the index up to which the log is on disk.
func (l *leaderLog) Durable() uint64 { return l.durable.Load() }

// waitDurable waits until the log holds index on disk, the log fails or
// closes (its error), or ctx ends (ctx's).
func (l *leaderLog) waitDurable(ctx context.Context, index uint64) error {
	for {
		if l.durable.Load() >= index {
			return nil // the common case: no lock
		}
		l.mu.Lock()
		d, err, ch := l.durable.Load(), l.err, l.changed
		l.mu.Unlock()
		if d >= index {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain waits until what is queued now is written (not what the leader
// queues meanwhile), or the log fails. It waits for those entries to
// leave the queue, not for the durable index to reach them: a follower
// deleting its tail may lower that index below them once written.
func (l *leaderLog) drain() error {
	l.mu.Lock()
	target := l.queuedLast()
	l.mu.Unlock()
	for target != 0 {
		l.mu.Lock()
		first, err, ch := l.queuedFirst(), l.err, l.changed
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if first == 0 || first > target {
			return nil
		}
		<-ch
	}
	return nil
}

// queuedLast is the index of the last entry queued or being written, 0
// when none is; l.mu held.
func (l *leaderLog) queuedLast() uint64 {
	for _, q := range [][]*raft.Log{l.queue, l.writing} {
		if n := len(q); n > 0 {
			return q[n-1].Index
		}
	}
	return 0
}

// queuedFirst is the index of the first entry queued or being written, 0
// when none is; l.mu held.
func (l *leaderLog) queuedFirst() uint64 {
	for _, q := range [][]*raft.Log{l.writing, l.queue} {
		if len(q) > 0 {
			return q[0].Index
		}
	}
	return 0
}

// loop is the writer: it writes what the leader queued, in order, one
// batch per wake-up.
func (l *leaderLog) loop() {
	defer close(l.done)
	for range l.kick {
		l.mu.Lock()
		batch := l.queue
		l.queue, l.writing = nil, batch
		l.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if f := l.testBeforeWrite.Load(); f != nil {
			(*f)()
		}
		l.wmu.Lock()
		err := l.LogStore.StoreLogs(batch)
		l.wmu.Unlock()
		l.mu.Lock()
		l.writing = nil
		if err != nil {
			err = fmt.Errorf("cluster: writing the leader's log (entries %d-%d): %w", batch[0].Index, batch[len(batch)-1].Index, err)
			l.failLocked(err)
			if l.onFail != nil {
				go l.onFail(err)
			}
		} else {
			l.advance(batch[len(batch)-1].Index)
		}
		l.mu.Unlock()
	}
}

// advance records entries up to index as written; l.mu held.
func (l *leaderLog) advance(index uint64) {
	if index > l.durable.Load() {
		l.durable.Store(index)
	}
	l.signal()
}

func (l *leaderLog) failLocked(err error) {
	if l.err == nil {
		l.err = err
		l.queue = nil
	}
	l.signal()
}

// signal wakes every waiter; l.mu held.
func (l *leaderLog) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// close writes what is queued, stops the writer and fails every later
// call and waiter with errLogClosed. The store below stays open.
func (l *leaderLog) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	close(l.kick) // the writer takes what is queued, then stops
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.err
	l.failLocked(errLogClosed)
	return err
}
