package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/fsm"
)

// stateMachine adapts fsm.State to raft.FSM: it serialises Apply against
// reads, publishes events, tracks the applied index, and stops the node on
// an entry it cannot apply.
type stateMachine struct {
	mu sync.RWMutex
	st *fsm.State
	// index is the last log entry applied to st (a command, or the
	// snapshot restored), stored only under mu: st and index change
	// together, and a reader that sees it at or past an entry and then
	// takes mu finds the entry in st.
	index atomic.Uint64
	hub   *hub
	log   hclog.Logger

	applied atomic.Uint64
	// appliedCh is closed and replaced after every apply: waiters for an
	// index select on it.
	appliedMu sync.Mutex
	appliedCh chan struct{}
	// noCommands is the last run of committed entries found to hold no
	// command (appliedThrough).
	noCommands atomic.Pointer[indexRun]

	// hash caches stateHash for one index; hashMu is taken under mu's read
	// lock, never the other way round.
	hashMu    sync.Mutex
	hashIndex uint64
	hash      []byte

	failed  atomic.Pointer[error]
	onFatal func(error)
	metrics *metrics        // set before raft starts
	snaps   *snapshotPolicy // set before raft starts; nil: none

	// testAfterPublish, when set (tests only), runs after an entry's
	// events are published and before its index is recorded as applied:
	// the window in which a reader sees the entry's content but not yet
	// its index in applied.
	testAfterPublish atomic.Pointer[func(index uint64)]
	// testBeforeApply, when set (tests and the planted
	// read-raft-applied), runs as a command entry reaches Apply, before
	// anything of it is applied: raft has already counted it in its
	// applied index.
	testBeforeApply atomic.Pointer[func(l *raft.Log)]
	// testBeforeRead, when set (tests only), runs as readAt begins.
	testBeforeRead atomic.Pointer[func()]
	// checks takes the state checkpoints replicas compare (statecheck.go);
	// set before raft starts.
	checks *stateCheckpoints
	// opts build every fsm.State: the first, and each one restored.
	opts []fsm.Option
	// logs is raft's log store, set before raft starts: Restore looks in
	// it for the entries after an older snapshot (nil: none, as in a
	// state machine that has applied nothing).
	logs raft.LogStore
	// durable is the node's log (leaderlog.go), set before raft starts:
	// an entry is applied only once the log holds it on disk, which on a
	// leader that writes while it replicates can come after raft commits
	// it. Nil: no wait (a state machine outside a node).
	durable interface {
		waitDurable(ctx context.Context, index uint64) error
		drain() error
	}
	// applyEarly is the planted leader-applies-unwritten defect: Apply
	// does not wait for the log (snapshots still do).
	applyEarly bool
}

func newStateMachine(h *hub, log hclog.Logger, onFatal func(error), opts ...fsm.Option) *stateMachine {
	return &stateMachine{st: fsm.New(opts...), opts: opts, hub: h, log: log, appliedCh: make(chan struct{}), onFatal: onFatal}
}

// Apply implements raft.FSM. It returns *fsm.Applied, or an error when the
// entry cannot be applied; after such an error every later entry is
// refused too and the node stops: replicas must not diverge.
func (m *stateMachine) Apply(l *raft.Log) interface{} {
	if errp := m.failed.Load(); errp != nil {
		return *errp
	}
	if l.Type != raft.LogCommand {
		return nil
	}
	if f := m.testBeforeApply.Load(); f != nil {
		(*f)(l)
	}
	start := time.Now()
	if m.durable != nil && !m.applyEarly {
		if err := m.durable.waitDurable(context.Background(), l.Index); err != nil {
			// The log failed (the node is stopping) or closed: the entry
			// is not applied here, nor anything after it. raft committed
			// it on the followers it counted, so the next leader may
			// apply it: its outcome is unknown, not failed.
			err = fmt.Errorf("%w: log entry %d committed, but not written to this node's log: %v", ErrIndeterminate, l.Index, err)
			m.failed.Store(&err)
			return err
		}
	}
	m.mu.Lock()
	a, err := m.st.Apply(l.Data)
	if err == nil {
		if m.checks.due(m.index.Load(), l.Index, m.st.Len()) && m.checks.idle() {
			// Apply is the only sender: a copy made now will be taken.
			m.checks.offer(l.Index, m.st.Snapshot())
		}
		m.index.Store(l.Index)
	}
	m.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("cluster: log entry %d: %w", l.Index, err)
		m.failed.Store(&err)
		m.log.Error("cannot apply log entry; stopping the node so replicas do not diverge", "index", l.Index, "term", l.Term, "error", err)
		if m.onFatal != nil {
			go m.onFatal(err)
		}
		return err
	}
	m.hub.publish(l.Index, a)
	if m.snaps != nil {
		m.snaps.applied(len(l.Data))
	}
	if m.metrics != nil {
		m.metrics.observeApplied(a)
	}
	if f := m.testAfterPublish.Load(); f != nil {
		(*f)(l.Index)
	}
	m.setApplied(l.Index)
	return &appliedEntry{Applied: a, start: start, end: time.Now()}
}

// appliedEntry is what Apply answers a command entry's proposer with: the
// state machine's result, and when applying it began and ended (the
// leader's stage metrics, propose.go).
type appliedEntry struct {
	*fsm.Applied
	start, end time.Time
}

func (m *stateMachine) setApplied(index uint64) {
	m.applied.Store(index)
	m.appliedMu.Lock()
	close(m.appliedCh)
	m.appliedCh = make(chan struct{})
	m.appliedMu.Unlock()
}

// appliedThrough reports whether the state reflects every entry up to idx,
// given raft's applied index: the last command in the state is at or past idx,
// or raft counted idx and every entry after that command up to idx is one
// raft does not hand to Apply (a no-op, barrier or configuration). It reads
// those entries' types from the log, only while the state is behind idx,
// and remembers the last run of entries found to be none of Apply's, which
// in an idle cluster every read asks about again (the term's no-op and
// barrier). *cmd is the caller's: the first command found not yet applied,
// so that its next calls read no log until the state has passed it (every
// apply wakes every waiting read).
//
// An entry the log no longer holds answers "not yet": on a node that
// installed a snapshot the state's index is the snapshot's last command,
// and the entries after it up to the snapshot's index are gone. The wait
// then ends at the next command applied: only a follower installs a
// snapshot, and a node that comes to lead proposes a tick as soon as its
// term's barrier has applied, before it serves any read.
//
// When it answers yes it also returns the state's index it judged: every
// command up to idx is in any state whose index is at least that
// (readAt's floor).
func (m *stateMachine) appliedThrough(idx, raftApplied uint64, cmd *uint64) (uint64, bool) {
	applied := m.index.Load() // the content's, which applied may lag (Apply)
	if applied >= idx {
		return applied, true
	}
	if raftApplied < idx || m.logs == nil || applied < *cmd {
		return 0, false
	}
	if r := m.noCommands.Load(); r != nil && r.from <= applied+1 && idx <= r.to {
		return applied, true
	}
	var l raft.Log
	for i := applied + 1; i <= idx; i++ {
		err := m.logs.GetLog(i, &l)
		if err != nil {
			return 0, false // a snapshot is being restored, or was (above)
		}
		if l.Type == raft.LogCommand {
			*cmd = i // committed, Apply not done with it yet
			return 0, false
		}
	}
	m.noCommands.Store(&indexRun{from: applied + 1, to: idx})
	return applied, true
}

// indexRun is the log entries from..to (committed: they never change).
type indexRun struct{ from, to uint64 }

// appliedChanged returns a channel closed at the next apply.
func (m *stateMachine) appliedChanged() <-chan struct{} {
	m.appliedMu.Lock()
	defer m.appliedMu.Unlock()
	return m.appliedCh
}

// read runs f with the state under the read lock.
func (m *stateMachine) read(f func(st *fsm.State)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.st)
}

// readAt runs f with the state and the index of its last entry, under the
// read lock, if that index is at least floor (what appliedThrough judged
// when a linearizable read's wait ended: the state then held every command
// the read must see); it reports whether it ran f. The state can go back
// after the wait: a node that stepped down may install an older snapshot
// whose later entries its log still holds (Restore), and raft then applies
// them again. A read answered from it would miss entries committed before
// it arrived.
func (m *stateMachine) readAt(floor uint64, f func(st *fsm.State, index uint64)) bool {
	if h := m.testBeforeRead.Load(); h != nil {
		(*h)()
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	index := m.index.Load()
	if index < floor {
		return false
	}
	f(m.st, index)
	return true
}

// stateHash returns the SHA-256 of the state's snapshot encoding, which is
// deterministic (replicas with the same state hash alike), and the index of
// the last entry applied to that state. It copies the state under the read
// lock (O(n), as Snapshot does) and encodes outside it, at most once per
// index: repeated calls at the same index return the cached hash.
func (m *stateMachine) stateHash() ([]byte, uint64, error) {
	m.mu.RLock()
	idx := m.index.Load()
	m.hashMu.Lock()
	if m.hash != nil && m.hashIndex == idx {
		h := m.hash
		m.hashMu.Unlock()
		m.mu.RUnlock()
		return h, idx, nil
	}
	m.hashMu.Unlock()
	sn := m.st.Snapshot()
	m.mu.RUnlock()
	sum, err := hashSnapshot(sn)
	if err != nil {
		return nil, 0, err
	}
	m.hashMu.Lock()
	if m.hash == nil || idx >= m.hashIndex {
		m.hash, m.hashIndex = sum, idx
	}
	m.hashMu.Unlock()
	return sum, idx, nil
}

// Snapshot implements raft.FSM: an immutable copy, encoded in Persist.
func (m *stateMachine) Snapshot() (raft.FSMSnapshot, error) {
	if errp := m.failed.Load(); errp != nil {
		return nil, *errp
	}
	if m.durable != nil {
		// raft records the snapshot at the last entry it handed this
		// state machine, which may be one Apply never sees (a no-op, a
		// barrier, a configuration) and the leader may not have written
		// yet: a snapshot past the log's end would outlive a kill that
		// loses the queue, and the next write would not follow the log.
		if err := m.durable.drain(); err != nil {
			return nil, err
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	// index changes with st under mu: exactly the last entry this
	// snapshot contains (raft calls Snapshot between applies anyway).
	return &fsmSnapshot{index: m.index.Load(), sn: m.st.Snapshot(), log: m.log}, nil
}

// Restore implements raft.FSM: builds fresh state from the snapshot and
// swaps it in; on error the current state is kept.
//
// A snapshot older than the state already applied is refused
// (errStaleSnapshot) when the log no longer holds the entries after it.
// hashicorp/raft installs a stale InstallSnapshot from a leader whose view
// of this follower fell behind, rewinds its applied index to the
// snapshot's and applies the entries after it again — which panics on
// "log not found" once this node's own newer snapshot has compacted them
// (hashicorp/raft issues 85 and 697; the soak's seed 9). Refused, the
// InstallSnapshot fails and the leader retries with entries or a newer
// snapshot. With the entries still in the log the rewind is harmless (they
// are applied again to the same result), and refusing would only keep
// the leader sending the same snapshot until it takes a newer one.
func (m *stateMachine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var hdr [8]byte
	if _, err := io.ReadFull(rc, hdr[:]); err != nil {
		err = fmt.Errorf("%w: reading index: %v", fsm.ErrCorruptSnapshot, err)
		m.log.Error("snapshot restore failed", "error", err)
		return err
	}
	index := binary.BigEndian.Uint64(hdr[:])
	m.mu.RLock()
	have := m.index.Load()
	m.mu.RUnlock()
	if index < have && !m.logHolds(index+1, have) {
		err := fmt.Errorf("%w: snapshot at index %d, state applied to %d, entries %d-%d no longer in the log", errStaleSnapshot, index, have, index+1, have)
		m.log.Warn("refused a snapshot older than the applied state; the leader will send entries or a newer one", "snapshot-index", index, "applied", have)
		return err
	}
	st, err := fsm.Restore(rc, m.opts...)
	if err != nil {
		m.log.Error("snapshot restore failed", "error", err)
		return err
	}
	m.mu.Lock()
	m.st = st
	m.index.Store(index)
	m.mu.Unlock()
	// Watchers connected now have missed everything up to index: cut them
	// and refuse resumes from before it.
	m.hub.reset(index)
	m.setApplied(index)
	return nil
}

// logHolds reports whether the log store holds every entry from first to
// last.
func (m *stateMachine) logHolds(first, last uint64) bool {
	if m.logs == nil {
		return false
	}
	lo, err1 := m.logs.FirstIndex()
	hi, err2 := m.logs.LastIndex()
	return err1 == nil && err2 == nil && lo != 0 && lo <= first && hi >= last
}

// errStaleSnapshot refuses a snapshot older than the applied state whose
// later entries are gone from the log.
var errStaleSnapshot = errors.New("cluster: refused a snapshot older than the state already applied")

// fsmSnapshot is written as the index of the last entry it contains (8
// bytes, big endian) followed by the fsm snapshot.
type fsmSnapshot struct {
	index uint64
	sn    *fsm.Snapshot
	log   hclog.Logger
}

// Persist writes the snapshot; the sink is cancelled on every error path.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], s.index)
	_, err := sink.Write(hdr[:])
	if err == nil {
		_, err = s.sn.WriteTo(sink)
	}
	if err != nil {
		s.log.Error("snapshot persist failed", "error", err)
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
