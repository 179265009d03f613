package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrCorruptStore is wrapped by every error that says a node's own data
// dir holds bytes that changed after they were written: a log entry that
// fails its checksum (*CorruptLogError) or a snapshot that fails its CRC
// (*CorruptSnapshotError). A node that meets one stops, or refuses to
// start; it is never repaired in place (docs/OPERATIONS.md, "Corruption").
var ErrCorruptStore = errors.New("cluster: corrupt data dir")

// replaceAdvice is what an operator must do with a node whose disk lied.
func replaceAdvice(node string) string {
	if node == "" {
		node = "<this node's id>"
	}
	return "this node's data cannot be trusted: replace the node (on a healthy node: leasectl members remove " +
		node + "; wipe this node's data dir; start it again with --join <a healthy node's address>)"
}

// CorruptLogError names a log entry in the log store (raft.db, or wal/)
// that fails its checksum or cannot be read.
type CorruptLogError struct {
	Node  string // the node's id, when known
	Path  string // the raft.db file or the wal directory
	Index uint64 // the entry's Raft index
	Err   error
}

func (e *CorruptLogError) Error() string {
	return fmt.Sprintf("cluster: corrupt log entry %d in %s: %v; %s", e.Index, e.Path, e.Err, replaceAdvice(e.Node))
}

// Unwrap returns ErrCorruptStore and the cause.
func (e *CorruptLogError) Unwrap() []error { return []error{ErrCorruptStore, e.Err} }

// CorruptSnapshotError names a snapshot that fails its CRC or cannot be
// read.
type CorruptSnapshotError struct {
	Node string // the node's id, when known
	Path string // the snapshot's directory
	Err  error
}

func (e *CorruptSnapshotError) Error() string {
	return fmt.Sprintf("cluster: corrupt snapshot %s: %v; %s", e.Path, e.Err, replaceAdvice(e.Node))
}

// Unwrap returns ErrCorruptStore and the cause.
func (e *CorruptSnapshotError) Unwrap() []error { return []error{ErrCorruptStore, e.Err} }

// checkSnapshots opens the node's snapshots newest first, which makes
// raft's file store verify each one's CRC-64 over state.bin, before raft
// restores one. raft itself, on a CRC mismatch, falls back to an older
// snapshot, and panics ("log not found") when the log no longer holds the
// entries after it, or says only "failed to load any existing snapshots".
// Here a corrupt snapshot is logged with its path; the node starts only
// when an intact snapshot remains whose following entries the log still
// holds (raft then restores it and replays the log: the corrupt bytes are
// never used), and otherwise refuses with a *CorruptSnapshotError. It
// costs one extra read of the snapshot restored at start.
func checkSnapshots(store raft.SnapshotStore, logs raft.LogStore, dataDir, node string, log hclog.Logger) error {
	metas, err := store.List()
	if err != nil {
		return &CorruptSnapshotError{Node: node, Path: filepath.Join(dataDir, "snapshots"), Err: err}
	}
	var bad *CorruptSnapshotError
	for _, m := range metas {
		_, rc, err := store.Open(m.ID)
		if err != nil {
			cerr := &CorruptSnapshotError{Node: node, Path: filepath.Join(dataDir, "snapshots", m.ID), Err: err}
			log.Error("corrupt snapshot; it will not be restored", "path", cerr.Path, "error", err)
			if bad == nil {
				bad = cerr
			}
			continue
		}
		_ = rc.Close()
		if bad == nil {
			return nil
		}
		first, ferr := logs.FirstIndex()
		if ferr != nil || first == 0 || first > m.Index+1 {
			return fmt.Errorf("%w (the older snapshot %s at index %d cannot be used: the log starts at index %d)", bad, m.ID, m.Index, first)
		}
		log.Error("falling back to an older snapshot and replaying the log; this disk returned corrupt bytes, plan to replace the node",
			"corrupt", bad.Path, "snapshot", m.ID, "index", m.Index)
		return nil
	}
	if bad != nil {
		return bad
	}
	return nil
}

// checkedSnapshotStore reports a snapshot that fails to open (raft's file
// store verifies its CRC on Open) while the node runs, e.g. when a leader
// reads its newest snapshot to send it to a lagging follower: the node
// stops (onCorrupt) rather than keep serving from a disk that lies.
type checkedSnapshotStore struct {
	raft.SnapshotStore
	dir       string
	node      string
	log       hclog.Logger
	onCorrupt corruptHandler

	createMu   sync.Mutex
	lastCreate int64 // unix milliseconds when the last Create returned
}

// Create implements raft.SnapshotStore. raft's file store names a
// snapshot term-index-milliseconds: two created in one millisecond at one
// index (raft snapshotting the state an installed snapshot gave it while
// the leader sends that snapshot again, seen in the storage nemesis's
// runs) got one name, wrote into one directory and corrupted each other,
// and the node stopped on the CRC mismatch. Creates are serialized, and
// each starts in a later millisecond than the last one returned (waiting
// at most 5 ms, should the wall clock have stepped back).
func (s *checkedSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	for i := 0; i < 25 && time.Now().UnixMilli() <= s.lastCreate; i++ {
		time.Sleep(200 * time.Microsecond)
	}
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	s.lastCreate = time.Now().UnixMilli()
	return sink, err
}

// Open implements raft.SnapshotStore.
func (s *checkedSnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err // reaped meanwhile: not corruption
	}
	if err != nil {
		cerr := &CorruptSnapshotError{Node: s.node, Path: filepath.Join(s.dir, "snapshots", id), Err: err}
		s.log.Error("snapshot cannot be opened; stopping the node", "path", cerr.Path, "error", cerr)
		s.onCorrupt.report(cerr)
		return nil, nil, cerr
	}
	return meta, rc, nil
}

// checkStores verifies the node's log and newest snapshot before raft
// reads them and returns the checking wrappers (their onCorrupt is set
// once raft runs).
func (n *Node) checkStores(store raft.LogStore, snaps raft.SnapshotStore) (*checkedLogStore, *checkedSnapshotStore, error) {
	if err := checkCorruptMarker(n.cfg.DataDir, n.cfg.ID); err != nil {
		n.log.Error("refusing to start", "error", err)
		return nil, nil, err
	}
	path := logStorePath(n.cfg.DataDir, n.cfg.LogStore)
	checked, err := newCheckedLogStore(store, path, n.cfg.ID, n.log, n.fsmOptions()...)
	if err != nil {
		n.log.Error("refusing to start", "error", err)
		return nil, nil, err
	}
	if err := checkSnapshots(snaps, store, n.cfg.DataDir, n.cfg.ID, n.log); err != nil {
		n.log.Error("refusing to start", "error", err)
		return nil, nil, err
	}
	return checked, &checkedSnapshotStore{SnapshotStore: snaps, dir: n.cfg.DataDir, node: n.cfg.ID, log: n.log}, nil
}
