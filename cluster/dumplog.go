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

// DumpLog reads a stopped node's data dir offline — raft.db (opened read
// only) and, when the log was compacted, the newest snapshot — replays the
// entries through a fresh fsm.State without starting Raft, and writes one
// LogRecord per line to w: a range record, the snapshot's remembered
// request ids, then every command with its result, in log order.
//
// The store holds every entry the node wrote, including a tail that may
// never have been committed (a deposed leader's); callers that need
// committed entries only must bound the index themselves (for example by
// the applied index the node reported). An entry the FSM cannot decode is
// an error.
func DumpLog(dataDir string, w io.Writer) error {
	path := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("cluster: dump-log: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, walDirName)); err == nil {
		// raft-wal has no read-only open (it recovers its tail and prunes
		// segment files): dumping would have to change the data dir, and
		// raft.db alone holds no entries, which would read as an empty log.
		return fmt.Errorf("cluster: dump-log: %s keeps its log in %s (--log-store wal), which dump-log cannot read without changing it; only boltdb data dirs can be dumped",
			dataDir, filepath.Join(dataDir, walDirName))
	}
	// A damaged file is an error, never a bbolt panic (datadir.go).
	if err := checkBoltFile(path); err != nil {
		return fmt.Errorf("cluster: dump-log: %w", err)
	}
	return guardDisk(path, func() error { return dumpLog(dataDir, path, w) })
}

func dumpLog(dataDir, path string, w io.Writer) error {
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second}})
	if err != nil {
		return fmt.Errorf("cluster: dump-log: open %s: %w", path, err)
	}
	defer store.Close()
	first, err := store.FirstIndex()
	if err != nil {
		return err
	}
	last, err := store.LastIndex()
	if err != nil {
		return err
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
			return fmt.Errorf("cluster: dump-log: entry %d: %w", i, err)
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
			return fmt.Errorf("cluster: dump-log: entry %d: %w", i, err)
		}
		a, err := st.Apply(l.Data)
		if err != nil {
			return fmt.Errorf("cluster: dump-log: entry %d: %w", i, err)
		}
		if b == nil {
			continue // an ignorable entry this version does not know
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
