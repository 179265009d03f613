package cluster

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
	"github.com/leasefence/leasefence/internal/dumplog"
)

// Kinds of a LogRecord (dumplog's, named here for cluster's callers).
const (
	LogRange   = dumplog.KindRange
	LogDedup   = dumplog.KindDedup
	LogCommand = dumplog.KindCommand
)

// LogRecord is one line of DumpLog's output (JSON). Its schema lives in
// internal/dumplog, shared with the harness that reads it.
type LogRecord = dumplog.Record

// DumpLog reads a stopped node's data dir offline — its log and, when the
// log was compacted, the newest snapshot — replays the entries through a
// fresh fsm.State without starting Raft, and writes one LogRecord per line
// to w: a range record, the snapshot's remembered request ids, then every
// command with its result, in log order.
//
// It never changes the data dir. raft.db is opened read only (its shared
// lock also makes a running node's data dir fail to open). A wal log
// (--log-store wal) is read from a copy: raft-wal has no read-only open
// (it recovers its tail segment and deletes segment files its metadata no
// longer lists), so DATA_DIR/wal is copied into a temporary directory,
// opened there and removed afterwards.
//
// The store holds every entry the node wrote, including a tail that may
// never have been committed (a deposed leader's); callers that need
// committed entries only must bound the index themselves (for example by
// the applied index the node reported). An entry the FSM cannot decode is
// an error, and so is a damaged raft.db or wal (never a panic).
func DumpLog(dataDir string, w io.Writer) error {
	path := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("cluster: dump-log: %w", err)
	}
	// A damaged file is an error, never a bbolt panic (datadir.go).
	if err := checkBoltFile(path); err != nil {
		return fmt.Errorf("cluster: dump-log: %w", err)
	}
	return guardDisk(path, func() error {
		stable, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second}})
		if err != nil {
			return fmt.Errorf("cluster: dump-log: open %s: %w", path, err)
		}
		defer stable.Close()
		// The store the data dir was made with; one that holds nothing
		// yet dumps as boltdb would: an empty log.
		kind, err := madeLogStore(dataDir, stable, true)
		if err != nil {
			return fmt.Errorf("cluster: dump-log: %w", err)
		}
		if kind == LogStoreWAL {
			return dumpWALLog(dataDir, w)
		}
		return dumpLog(dataDir, stable, path, w)
	})
}

// dumpWALLog dumps the wal log of dataDir from a copy of DATA_DIR/wal in a
// temporary directory (removed before it returns): raftwal.Open on the
// original would change it.
func dumpWALLog(dataDir string, w io.Writer) error {
	walDir := filepath.Join(dataDir, walDirName)
	meta := filepath.Join(walDir, metadb.FileName)
	fi, err := os.Stat(meta)
	if err != nil {
		// raft-wal would start an empty log without its metadata: the
		// dump would read as a node that never wrote anything.
		return fmt.Errorf("cluster: dump-log: %s was created with the wal log store but %s is missing: its log is lost", dataDir, meta)
	}
	if fi.Size() == 0 {
		return fmt.Errorf("cluster: dump-log: %s is empty: the wal log of %s is lost", meta, dataDir)
	}
	if err := checkBoltFile(meta); err != nil {
		return fmt.Errorf("cluster: dump-log: %w", err)
	}
	tmp, err := os.MkdirTemp("", "leased-dump-log-wal-")
	if err != nil {
		return fmt.Errorf("cluster: dump-log: a directory for a copy of %s: %w", walDir, err)
	}
	defer os.RemoveAll(tmp)
	if err := copyFiles(walDir, tmp); err != nil {
		return fmt.Errorf("cluster: dump-log: copying %s: %w", walDir, err)
	}
	return guardDisk(walDir, func() error {
		logs, err := raftwal.Open(tmp, raftwal.WithLogger(hclog.NewNullLogger()))
		if err != nil {
			return fmt.Errorf("cluster: dump-log: open %s (a copy of it): %w", walDir, err)
		}
		defer logs.Close()
		return dumpLog(dataDir, logs, walDir, w)
	})
}

// copyFiles copies every regular file of dir (raft-wal keeps no
// subdirectories) into to, which exists.
func copyFiles(dir, to string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(dir, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// dumpLog replays store (raft.db opened read only, or a copy of a wal
// log) onto the newest snapshot of dataDir when the log was compacted, and
// writes the records (DumpLog). where names the store's file or directory
// in errors.
func dumpLog(dataDir string, store raft.LogStore, where string, w io.Writer) error {
	first, err := store.FirstIndex()
	if err != nil {
		return fmt.Errorf("cluster: dump-log: %s: %w", where, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fmt.Errorf("cluster: dump-log: %s: %w", where, err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)

	st := fsm.New()
	rng := LogRecord{Kind: LogRange, LogFirst: first, LogLast: last, Replayed: 1}
	if first != 1 {
		// Compacted (or emptied by a snapshot install): start from the
		// newest snapshot, which must reach the entry before the first one
		// kept.
		snapIndex, restored, err := newestSnapshot(dataDir)
		if err != nil {
			return err
		}
		switch {
		case restored != nil && (first == 0 || snapIndex+1 >= first):
			st, rng.SnapshotIndex, rng.Replayed = restored, snapIndex, snapIndex+1
		case restored == nil && first == 0:
			// An empty node.
		default:
			return fmt.Errorf("cluster: dump-log: the log starts at %d but the newest snapshot ends at %d", first, snapIndex)
		}
	}
	var dedup []LogRecord
	st.EachRequestID(func(id string, at int64, l fsm.Lease, refused bool) {
		if refused {
			dedup = append(dedup, LogRecord{Kind: LogDedup, RequestID: id, NowNs: at, Type: "acquire", Resource: l.Resource, Result: "refused"})
			return
		}
		dedup = append(dedup, LogRecord{Kind: LogDedup, RequestID: id, NowNs: at, Type: "acquire", Resource: l.Resource,
			Scope: l.Scope, Holder: l.Holder, LeaseID: api.FormatLeaseID(l.ID[:]), Token: l.Token, Result: "ok"})
	})
	var cmds []LogRecord
	for i := rng.Replayed; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return fmt.Errorf("cluster: dump-log: %s: entry %d: %w", where, i, err)
		}
		at := int64(0)
		if !l.AppendedAt.IsZero() {
			at = l.AppendedAt.UnixNano()
		}
		if rng.FirstAppendedAtNs == 0 {
			// The first stamped entry (a bootstrap configuration has none):
			// every entry created after it has a higher index.
			rng.FirstAppendedAtNs = at
		}
		if l.Type != raft.LogCommand {
			continue
		}
		b, err := fsm.DecodeEntry(l.Data)
		if err != nil {
			return fmt.Errorf("cluster: dump-log: %s: entry %d: %w", where, i, err)
		}
		a, err := st.Apply(l.Data)
		if err != nil {
			return fmt.Errorf("cluster: dump-log: %s: entry %d: %w", where, i, err)
		}
		if b == nil {
			continue // an ignorable entry: one this version does not know, or a member recorded as having served (no command)
		}
		for j, c := range b.Commands {
			rec := LogRecord{Kind: LogCommand, Index: i, Term: l.Term, AppendedAtNs: at, NowNs: a.Now}
			describeCommand(&rec, c, a.Results[j])
			cmds = append(cmds, rec)
		}
	}
	if err := enc.Encode(rng); err != nil {
		return err
	}
	for _, r := range append(dedup, cmds...) {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func describeCommand(rec *LogRecord, c *fsmpb.Command, r fsm.Result) {
	lease := func() {
		if r.Lease.Resource != "" {
			rec.LeaseID, rec.Token, rec.Resource, rec.Scope, rec.Holder = api.FormatLeaseID(r.Lease.ID[:]), r.Lease.Token, r.Lease.Resource, r.Lease.Scope, r.Lease.Holder
		}
	}
	refused := func(ok string) {
		if r.Err != nil {
			rec.Result, rec.Error = "refused", r.Err.Error()
			return
		}
		rec.Result = ok
		lease()
	}
	switch op := c.Op.(type) {
	case *fsmpb.Command_Acquire:
		rec.Type, rec.RequestID, rec.Resource, rec.Scope, rec.Holder = "acquire", op.Acquire.RequestId, op.Acquire.Resource, op.Acquire.Scope, op.Acquire.Holder
		if r.Replayed {
			refused("replayed")
		} else {
			refused("ok")
		}
	case *fsmpb.Command_Renew:
		rec.Type, rec.LeaseID = "renew", api.FormatLeaseID(op.Renew.LeaseId)
		refused("ok")
	case *fsmpb.Command_Release:
		rec.Type, rec.LeaseID = "release", api.FormatLeaseID(op.Release.LeaseId)
		rec.Result = "not-released"
		if r.Released {
			rec.Result = "released"
			lease()
		}
	case *fsmpb.Command_Tick:
		rec.Type, rec.Result, rec.Expired = "tick", "ok", r.Expired
	}
}

// newestSnapshot restores the newest snapshot in dataDir; (0, nil, nil)
// when there is none.
func newestSnapshot(dataDir string) (uint64, *fsm.State, error) {
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, hclog.NewNullLogger())
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: dump-log: snapshot store: %w", err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, nil, err
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: dump-log: snapshot %s: %w", metas[0].ID, err)
	}
	defer rc.Close()
	var hdr [8]byte
	if _, err := io.ReadFull(rc, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("cluster: dump-log: snapshot %s: %w", metas[0].ID, err)
	}
	st, err := fsm.Restore(rc)
	if err != nil {
		return 0, nil, fmt.Errorf("cluster: dump-log: snapshot %s: %w", metas[0].ID, err)
	}
	// The header holds the last command index the snapshot contains; raft
	// replays from the meta's index (which counts other entries too).
	if idx := binary.BigEndian.Uint64(hdr[:]); idx > metas[0].Index {
		return 0, nil, errors.New("cluster: dump-log: snapshot " + metas[0].ID + " contains entries past its meta's index")
	}
	return metas[0].Index, st, nil
}
