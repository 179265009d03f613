package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// The log stores Config.LogStore names.
const (
	// LogStoreBoltDB keeps the Raft log in raft.db (raft-boltdb/v2), in
	// the same bbolt file as the stable store.
	LogStoreBoltDB = "boltdb"
	// LogStoreWAL keeps the Raft log in raft-wal segment files under
	// DataDir/wal (Consul's log store since 1.15); raft.db still holds the
	// stable store (term and vote).
	LogStoreWAL = "wal"
)

// defaultLogStore is what DefaultConfig puts in Config.LogStore: empty,
// the data dir's own store (newLogStore for a new one). Tests may set it
// (logstore_matrix_test.go) to run the whole package with one store;
// nothing else changes it.
var defaultLogStore = ""

// newLogStore is the log store of a new data dir when Config.LogStore is
// empty: raft-wal, about 3x faster per synced write than raft.db and 1.5x
// on the acquire+release cycle (docs/PERFORMANCE.md, "Log store"), with
// every durability test passing on it.
const newLogStore = LogStoreWAL

// walDirName is the directory under the data dir that holds the raft-wal
// log.
const walDirName = "wal"

// logStoreKey is the stable-store key (in raft.db) that records which log
// store the data dir was created with.
var logStoreKey = []byte("LeasefenceLogStore")

// logStorePath is where the log of a data dir with this store lives: the
// file or directory an operator is pointed at when an entry is corrupt.
func logStorePath(dataDir, kind string) string {
	if kind == LogStoreWAL {
		return filepath.Join(dataDir, walDirName)
	}
	return filepath.Join(dataDir, "raft.db")
}

// openStores opens the node's stable store (raft.db, always raft-boltdb)
// and its log store: the same BoltStore for LogStoreBoltDB, raft-wal in
// DataDir/wal for LogStoreWAL, after checkLogStoreChoice said the data
// dir was made with that store. An empty want means the data dir's own
// store; kind is the one opened. closeLog closes the log store when it is
// not the stable store (nil otherwise). On error nothing stays open.
func openStores(dataDir, want string, lockWait time.Duration, log hclog.Logger) (stable *raftboltdb.BoltStore, logs raft.LogStore, closeLog io.Closer, kind string, err error) {
	stable, err = openLogStoreWithin(filepath.Join(dataDir, "raft.db"), true, lockWait)
	if err != nil {
		return nil, nil, nil, "", err
	}
	kind, err = checkLogStoreChoice(dataDir, stable, want)
	if err != nil {
		stable.Close()
		return nil, nil, nil, "", err
	}
	if kind != LogStoreWAL {
		return stable, stable, nil, kind, nil
	}
	dir := filepath.Join(dataDir, walDirName)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		stable.Close()
		return nil, nil, nil, "", fmt.Errorf("cluster: log store: %w", err)
	}
	// v0.4.1 or later: v0.4.0's Close left wal-meta.db (and its lock)
	// open, so a node restarted in the same process waited on it forever,
	// and a tail truncation (raft clearing a deposed leader's suffix)
	// sealed a segment without its index block: after a kill the node
	// could not read its log again ("sealed segment has no index block",
	// raft-wal issue 31).
	w, err := raftwal.Open(dir, raftwal.WithLogger(log.Named("wal")))
	if err != nil {
		stable.Close()
		return nil, nil, nil, "", fmt.Errorf("cluster: log store %s: %w", dir, err)
	}
	d, err := guardWAL(w, stable, dir, log)
	if err != nil {
		w.Close()
		stable.Close()
		return nil, nil, nil, "", err
	}
	return stable, d, d, kind, nil
}

// walDurableKey is the stable-store key (raft.db) of an index the wal log
// held durably: its last index as last seen, at most walRecordEvery ago
// while the node runs and exactly at a clean stop.
var walDurableKey = []byte("LeasefenceWALDurableIndex")

// walRecordEvery is how often a running node records its wal's last
// index (one small raft.db transaction when it moved).
const walRecordEvery = time.Second

// durableWAL is the raft-wal log store with its tail guarded. raft-wal
// checks a checksum over the last batch of its open segment only, and at
// open reads a batch that fails it as a write torn by a crash: it drops
// the batch, silently. After a crash that is right (the batch was never
// synced, so never acknowledged); after a flipped bit on disk it is not:
// the node would start without entries it acknowledged, could vote for a
// candidate lacking them, and a committed grant could be lost (a token
// issued twice). raft.db, a separate file, remembers how far the log was
// known to reach; a log that now ends before that is refused at start as
// corrupt, like a changed entry.
type durableWAL struct {
	*raftwal.WAL
	stable *raftboltdb.BoltStore
	log    hclog.Logger
	// installed, set before raft starts, returns the snapshot raft has
	// just installed (installedSnapshot) when it deletes the whole log;
	// ok is false when there is none.
	installed func() (index, term uint64, ok bool)

	mu       sync.Mutex // orders recording against tail deletions
	recorded uint64

	stop, done chan struct{}
}

// guardWAL checks w against the index raft.db recorded, refusing a log
// that lost its tail, and starts recording.
func guardWAL(w *raftwal.WAL, stable *raftboltdb.BoltStore, dir string, log hclog.Logger) (*durableWAL, error) {
	rec, err := stable.GetUint64(walDurableKey)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return nil, fmt.Errorf("cluster: reading raft state: %w", err)
	}
	last, err := w.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: log store %s: %w", dir, err)
	}
	if last < rec {
		return nil, &CorruptLogError{Path: dir, Index: last + 1, Err: fmt.Errorf(
			"the log ends at entry %d, but it held entry %d durably before the node stopped: "+
				"its newest batch was damaged on disk and dropped (raft-wal reads a batch that fails its checksum as a torn write)", last, rec)}
	}
	d := &durableWAL{WAL: w, stable: stable, log: log, recorded: rec, stop: make(chan struct{}), done: make(chan struct{})}
	go d.loop()
	return d, nil
}

func (d *durableWAL) loop() {
	defer close(d.done)
	t := time.NewTicker(walRecordEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			if err := d.recordLast(); err != nil {
				d.log.Warn("cannot record the wal's last index in raft.db", "error", err)
			}
		}
	}
}

// recordLast records the log's last index. raft-wal publishes an index
// only after the batch holding it is synced.
func (d *durableWAL) recordLast() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	last, err := d.WAL.LastIndex()
	if err != nil || last == d.recorded {
		return err
	}
	return d.record(last)
}

func (d *durableWAL) record(i uint64) error {
	if err := d.stable.SetUint64(walDurableKey, i); err != nil {
		return err
	}
	d.recorded = i
	return nil
}

// DeleteRange implements raft.LogStore. Before a deletion that reaches the
// log's end (raft replacing a deposed leader's suffix; the whole log after
// a snapshot is installed) it lowers the record, so that a stop between
// the two does not make the shorter log look damaged.
//
// After installing a snapshot, hashicorp/raft deletes the whole of a
// monotonic log (removeOldLogs), but keeps its cached last index and sets
// its applied index back to the snapshot's. When the log held entries
// past the snapshot (the leader sent the same snapshot twice, the second
// after the follower had appended past it), raft then matched the
// leader's next append against entries it no longer had, took it, and
// panicked "log not found" re-applying the entries after the snapshot
// (hashicorp/raft#697; TestFollowerOnWALInstallsASnapshotOlderThanItsLog).
// So a deletion of the whole log keeps the entries past the installed
// snapshot when they continue it: the log holds the snapshot's entry in
// the snapshot's term, or begins right after it. They agree with the
// snapshot (raft's log matching; an index's committed term is unique),
// and raft treats them as it treats any log store's entries past a
// snapshot (a store that is not monotonic keeps them too).
func (d *durableWAL) DeleteRange(min, max uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	first, err := d.WAL.FirstIndex()
	if err != nil {
		return err
	}
	last, err := d.WAL.LastIndex()
	if err != nil {
		return err
	}
	if min <= first && max >= last && last > 0 {
		if from, ok := d.continuesSnapshot(first, last); ok {
			d.log.Info("keeping the log entries past the installed snapshot", "from", from, "to", last)
			if from > first {
				return d.WAL.DeleteRange(min, from-1)
			}
			return nil
		}
	}
	if max >= last {
		to := min - 1
		if min <= first {
			to = 0 // the whole log: the record may be older than its head
		}
		if to < d.recorded {
			if err := d.record(to); err != nil {
				return fmt.Errorf("cluster: recording the wal's last index before a deletion: %w", err)
			}
		}
	}
	return d.WAL.DeleteRange(min, max)
}

// continuesSnapshot reports whether the log, from first to last,
// continues the snapshot raft just installed (index S, term T): it holds
// entry S in term T (from is S), or it begins at S+1 (from is first).
func (d *durableWAL) continuesSnapshot(first, last uint64) (from uint64, ok bool) {
	if d.installed == nil {
		return 0, false
	}
	s, term, ok := d.installed()
	switch {
	case !ok:
		return 0, false
	case s+1 == first:
		return first, true
	case s < first || s > last:
		return 0, false
	}
	var l raft.Log
	if err := d.WAL.GetLog(s, &l); err != nil || l.Term != term {
		return 0, false
	}
	return s, true
}

// installedSnapshot returns the snapshot r has just installed, while it
// deletes the log after the install: r sets its applied index to the
// snapshot's before (this node's own newer snapshots may be in snaps too,
// so the newest is not the one). ok is false when snaps holds none at
// that index, or r is nil.
func installedSnapshot(r *raft.Raft, snaps raft.SnapshotStore) (index, term uint64, ok bool) {
	if r == nil {
		return 0, 0, false
	}
	applied := r.AppliedIndex()
	metas, err := snaps.List()
	if err != nil {
		return 0, 0, false
	}
	for _, m := range metas {
		if m.Index == applied {
			return m.Index, m.Term, true
		}
	}
	return 0, 0, false
}

// GetLog implements raft.LogStore: an entry below the log's first index is
// not found. raft-wal still serves entries compacted away while they sit
// in its open segment (it reads the segment being written before the
// head), so a follower far behind caught up from the leader's log instead
// of installing its snapshot; raft.db drops them, and so does this.
func (d *durableWAL) GetLog(index uint64, l *raft.Log) error {
	first, err := d.WAL.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return d.WAL.GetLog(index, l)
}

// Close records the last index (exact at a clean stop) and closes the
// log; raft.db must still be open.
func (d *durableWAL) Close() error {
	close(d.stop)
	<-d.done
	return errors.Join(d.recordLast(), d.WAL.Close())
}

// madeLogStore reads, without changing anything, which log store dataDir
// was made with: the one raft.db records, else wal when wal/ holds its
// metadata, else boltdb when raft.db holds raft state (held: a term or
// log entries; a data dir from before the option). "" means none yet (a
// new data dir).
func madeLogStore(dataDir string, stable *raftboltdb.BoltStore, held bool) (string, error) {
	rec, err := stable.Get(logStoreKey)
	switch {
	case err == nil && (string(rec) == LogStoreBoltDB || string(rec) == LogStoreWAL):
		return string(rec), nil
	case err == nil:
		return "", fmt.Errorf("cluster: %s records an unknown log store %q", filepath.Join(dataDir, "raft.db"), rec)
	case !errors.Is(err, raftboltdb.ErrKeyNotFound):
		return "", fmt.Errorf("cluster: reading raft state: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, walDirName, metadb.FileName)); err == nil {
		return LogStoreWAL, nil
	}
	if held {
		return LogStoreBoltDB, nil
	}
	return "", nil
}

// checkLogStoreChoice makes sure a data dir is only ever opened with the
// log store it was created with, and returns that store (want, or with
// want empty the data dir's own: newLogStore for a new one). Opening it with the other one would find
// an empty log next to a stored term and vote: the node would start with
// its log gone (it could vote for a candidate missing entries it had
// acknowledged: lost commits). So:
//
//   - the choice is recorded in raft.db (logStoreKey) on a first start,
//     before the log store is opened;
//   - a data dir without the record, from before this option, was made
//     with boltdb when raft.db holds a term or log entries (a wal/ dir
//     with its metadata means wal);
//   - a recorded wal whose wal/wal-meta.db is missing while raft.db holds
//     a term is lost state, refused like an emptied raft.db.
func checkLogStoreChoice(dataDir string, stable *raftboltdb.BoltStore, want string) (string, error) {
	walMeta := filepath.Join(dataDir, walDirName, metadb.FileName)
	_, statErr := os.Stat(walMeta)
	walThere := statErr == nil
	term, err := stable.GetUint64([]byte("CurrentTerm"))
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return "", fmt.Errorf("cluster: reading raft state: %w", err)
	}
	boltLast, err := stable.LastIndex()
	if err != nil {
		return "", fmt.Errorf("cluster: reading raft state: %w", err)
	}
	made, err := madeLogStore(dataDir, stable, term > 0 || boltLast > 0)
	if err != nil {
		return "", err
	}
	if made == "" {
		// A first start: record the choice before any entry is written.
		if want == "" {
			want = newLogStore
		}
		if err := stable.Set(logStoreKey, []byte(want)); err != nil {
			return "", fmt.Errorf("cluster: recording the log store: %w", err)
		}
		return want, nil
	}
	if want != "" && made != want {
		return "", fmt.Errorf("cluster: data dir %s was created with the %q log store; it cannot start with log store %q "+
			"(its log would look empty next to its term and vote): start it with --log-store %s, "+
			"or replace the node to change stores (docs/OPERATIONS.md, Log store)", dataDir, made, want, made)
	}
	if made == LogStoreWAL && !walThere && term > 0 {
		return "", fmt.Errorf("cluster: data dir %s was created with the wal log store and raft.db holds term %d, but %s is missing: "+
			"this node has lost its log and must not start as if it had none; replace it: remove it from the cluster, "+
			"empty the data dir and start it with --join (docs/OPERATIONS.md, Replacing a dead node)", dataDir, term, walMeta)
	}
	if made == LogStoreBoltDB && walThere {
		return "", fmt.Errorf("cluster: data dir %s was created with the boltdb log store but holds %s: "+
			"remove the stray wal directory if it was put there by hand, or replace the node", dataDir, filepath.Join(dataDir, walDirName))
	}
	return made, nil
}
