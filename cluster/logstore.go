package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fsm"
)

// openLogStore opens the raft log and stable store, a bbolt file.
//
// With unsyncedFreelist (what nodes use), bbolt does not write its list of
// free pages on every commit. raft deletes the log's head after every
// snapshot, so the file soon holds thousands of free pages, and a synced
// freelist is rewritten in full by every commit: at a million live leases
// that was most of the leader's commit time (BenchmarkLogStoreCommit).
// The price is paid once, at open: bbolt rebuilds the list by walking the
// file's pages (the file holds only the trailing logs, tens of MB).
func openLogStore(path string, unsyncedFreelist bool) (*raftboltdb.BoltStore, error) {
	return openLogStoreWithin(path, unsyncedFreelist, dataDirLockWait)
}

// dataDirLockWait is how long a start waits for another process to let go
// of raft.db (bbolt's file lock).
const dataDirLockWait = 5 * time.Second

// openLogStoreWithin is openLogStore waiting at most wait for the lock.
func openLogStoreWithin(path string, unsyncedFreelist bool, wait time.Duration) (*raftboltdb.BoltStore, error) {
	opts := &bbolt.Options{Timeout: wait}
	if unsyncedFreelist {
		opts.NoFreelistSync = true
		opts.FreelistType = bbolt.FreelistMapType
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
	if errors.Is(err, bbolt.ErrTimeout) {
		who := "another process"
		if pid := lockHolder(path); pid != "" {
			who += ", pid " + pid
		}
		return nil, fmt.Errorf("cluster: data dir %s is locked by %s: it is in use by another leased or another node in this process, and every node needs a data dir of its own (%w)", filepath.Dir(path), who, err)
	}
	return store, err
}

// lockHolder returns the pid holding a lock on path as /proc/locks tells
// it (Linux), or "" when unknown.
func lockHolder(path string) string {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return ""
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	suffix := fmt.Sprintf(":%d", st.Ino)
	for _, line := range strings.Split(string(locks), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 1438 fe:00:762126 0 EOF"
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasSuffix(f[5], suffix) {
			return f[4]
		}
	}
	return ""
}

// checkedLogStore is the node's raft log store: raft-boltdb or raft-wal
// (Config.LogStore) with every command entry's checksum (fsm.VerifyEntry)
// checked on the way in and out.
//
// Only raft.LogCommand entries carry our bytes (the FSM's type byte and
// body); configuration entries are raft's own encoding and barrier/no-op
// entries are empty, so those pass unchecked.
//
// On read (GetLog), a mismatch is logged at ERROR with the file, the index
// and what to do, and stops the node (onCorrupt, run on its own goroutine:
// it shuts raft down, which must not wait on a raft goroutine). The entry
// is still returned as read, with no error: raft panics when a read in its
// apply path fails, and the FSM verifies the same checksum before it
// applies anything, so the entry is refused there, never applied. A leader
// that sends such an entry to a follower is refused by the follower's
// StoreLogs check.
//
// On write (StoreLogs), an entry that fails its checksum is refused: a
// follower never stores what its leader's disk (or the wire) corrupted.
type checkedLogStore struct {
	raft.LogStore
	path      string
	node      string
	log       hclog.Logger
	onCorrupt corruptHandler
	// opts are the node's entry-check options (fsm.VerifyEntry).
	opts []fsm.Option
	// writes observes each StoreLogs of the wrapped store that succeeded
	// (log_write_seconds); nil: none.
	writes prometheus.Observer
}

// newCheckedLogStore verifies every entry in store (the trailing logs the
// file holds, read once at open) and returns the checking store. A
// corrupt entry is a *CorruptLogError: the node must not start. opts are
// the node's (fsm.WithTestingKnobs).
func newCheckedLogStore(store raft.LogStore, path, node string, log hclog.Logger, opts ...fsm.Option) (*checkedLogStore, error) {
	s := &checkedLogStore{LogStore: store, path: path, node: node, log: log, opts: opts}
	first, err := store.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: first index: %w", path, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: last index: %w", path, err)
	}
	for i := first; first > 0 && i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); errors.Is(err, raft.ErrLogNotFound) {
			// A hole is not changed bytes: raft leaves them (a follower
			// killed while it installed a snapshot and compacted) and
			// reads only what it needs. Only an entry that is there and
			// fails its check is corruption.
			continue
		} else if err != nil {
			return nil, &CorruptLogError{Node: node, Path: path, Index: i, Err: err}
		}
		if err := checkLog(i, &l, opts); err != nil {
			return nil, &CorruptLogError{Node: node, Path: path, Index: i, Err: err}
		}
	}
	return s, nil
}

// checkLog verifies one entry read for index.
func checkLog(index uint64, l *raft.Log, opts []fsm.Option) error {
	if l.Index != index {
		return fmt.Errorf("entry read for index %d says index %d", index, l.Index)
	}
	if l.Type != raft.LogCommand {
		return nil
	}
	return fsm.VerifyEntry(l.Data, opts...)
}

// GetLog implements raft.LogStore (see checkedLogStore).
func (s *checkedLogStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if err := checkLog(index, l, s.opts); err != nil {
		cerr := &CorruptLogError{Node: s.node, Path: s.path, Index: index, Err: err}
		s.log.Error("corrupt log entry read from disk; stopping the node", "path", s.path, "index", index, "error", cerr)
		s.onCorrupt.report(cerr)
	}
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore for the store it wraps:
// raft-wal cannot hold a gap, so after installing a snapshot raft must
// empty it rather than leave the older entries in place. Without this the
// wrapper would hide that from raft (and from raft.LogCache above it).
func (s *checkedLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// StoreLog implements raft.LogStore.
func (s *checkedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs implements raft.LogStore: nothing is stored when one entry
// fails its checksum.
func (s *checkedLogStore) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if err := fsm.VerifyEntry(l.Data, s.opts...); err != nil {
			s.log.Error("refusing to store a log entry that fails its checksum (the sender's log or the wire corrupted it)", "index", l.Index, "term", l.Term, "error", err)
			return fmt.Errorf("cluster: log entry %d: %w", l.Index, err)
		}
	}
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	if err == nil && s.writes != nil {
		s.writes.Observe(time.Since(start).Seconds())
	}
	return err
}

// corruptHandler holds what a store calls when it reads corrupt bytes
// (the node's onFatal), set once raft runs; before that it does nothing.
type corruptHandler struct{ f atomic.Pointer[func(error)] }

func (h *corruptHandler) set(f func(error)) { h.f.Store(&f) }

// report runs the handler on its own goroutine: it shuts raft down, which
// must not wait on the raft goroutine that read the bytes.
func (h *corruptHandler) report(err error) {
	if f := h.f.Load(); f != nil {
		go (*f)(err)
	}
}
