package cluster

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// countFSM counts the commands it applied; its snapshot is that count.
type countFSM struct {
	mu sync.Mutex
	n  uint64
}

func (f *countFSM) Apply(*raft.Log) any { f.mu.Lock(); f.n++; f.mu.Unlock(); return nil }
func (f *countFSM) count() uint64       { f.mu.Lock(); defer f.mu.Unlock(); return f.n }

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnap(f.count()), nil }

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.n = binary.BigEndian.Uint64(b[:])
	f.mu.Unlock()
	return nil
}

type countSnap uint64

func (s countSnap) Persist(sink raft.SnapshotSink) error {
	if err := binary.Write(sink, binary.BigEndian, uint64(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (countSnap) Release() {}

// A follower on raft-wal that installs a snapshot older than its own log
// (the leader sent the same snapshot twice, the second while the follower
// had appended past it: seen when a wiped node rejoined under the storage
// nemesis) keeps the entries after the snapshot. hashicorp/raft empties a
// monotonic log store after every install (removeOldLogs) but keeps its
// cached last index and rewinds its applied index to the snapshot's: it
// then matched the leader's next append against the emptied log, took the
// entries, and panicked "log not found" re-applying those after the
// snapshot (hashicorp/raft#697). Raft runs here for real on raft-wal in a
// temp dir; the test plays the leader over raft's in-memory transport.
func TestFollowerOnWALInstallsASnapshotOlderThanItsLog(t *testing.T) {
	dir := t.TempDir()
	stable, logs, closeLog, _, err := openStores(dir, LogStoreWAL, dataDirLockWait, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	logs.(*durableWAL).snaps = snaps
	fAddr, ft := raft.NewInmemTransport("f")
	_, lt := raft.NewInmemTransport("leader")
	lt.Connect(fAddr, ft)
	conf := raft.DefaultConfig()
	conf.LocalID = "f"
	conf.HeartbeatTimeout, conf.ElectionTimeout = time.Hour, time.Hour
	conf.LeaderLeaseTimeout = time.Hour
	conf.Logger = hclog.NewNullLogger()
	fsm := &countFSM{}
	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, ft)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r.Shutdown().Error()
		closeLog.Close()
		stable.Close()
	}()

	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte("leader")}
	appendEntries := func(prev, to uint64) {
		t.Helper()
		req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1, PrevLogEntry: prev, LeaderCommitIndex: to}
		if prev > 0 {
			req.PrevLogTerm = 1
		}
		for i := prev + 1; i <= to; i++ {
			req.Entries = append(req.Entries, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
		}
		var resp raft.AppendEntriesResponse
		if err := lt.AppendEntries("f", fAddr, req, &resp); err != nil || !resp.Success {
			t.Fatalf("append %d..%d after %d: %v, %+v", prev+1, to, prev, err, resp)
		}
	}
	applied := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for fsm.count() != want || r.AppliedIndex() != want {
			if time.Now().After(deadline) {
				t.Fatalf("the follower applied %d commands (raft's applied index %d), want %d", fsm.count(), r.AppliedIndex(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	appendEntries(0, 10)
	applied(10)

	// The leader's snapshot at 8 (8 commands applied), installed although
	// the follower's log reaches 10.
	members := raft.Configuration{Servers: []raft.Server{{ID: "leader", Address: "leader"}, {ID: "f", Address: fAddr}}}
	var data bytes.Buffer
	binary.Write(&data, binary.BigEndian, uint64(8))
	req := &raft.InstallSnapshotRequest{
		RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: 1, Leader: []byte("leader"),
		LastLogIndex: 8, LastLogTerm: 1, Configuration: raft.EncodeConfiguration(members), ConfigurationIndex: 1,
		Size: int64(data.Len()),
	}
	var sresp raft.InstallSnapshotResponse
	if err := lt.InstallSnapshot("f", fAddr, req, &sresp, &data); err != nil || !sresp.Success {
		t.Fatalf("install snapshot: %v, %+v", err, sresp)
	}

	// The leader goes on from 10 (the follower's answers said it holds
	// it): the follower must hold and apply 9..11 again on the snapshot.
	appendEntries(10, 11)
	applied(11)
	for i := uint64(9); i <= 11; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Errorf("entry %d after the install: %v", i, err)
		}
	}
}
