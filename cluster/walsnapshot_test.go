package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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
// nemesis) keeps the entries after the snapshot, whether its log holds
// the snapshot's entry or begins right after it, and also when its own
// snapshot is newer than the one installed. hashicorp/raft empties a
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
	var running atomic.Pointer[raft.Raft]
	logs.(*durableWAL).installed = func() (uint64, uint64, bool) { return installedSnapshot(running.Load(), snaps) }
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
	running.Store(r)
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
		eventually(t, 10*time.Second, fmt.Sprintf("the follower to apply %d commands, its applied index %d", want, want), func() bool {
			return fsm.count() == want && r.AppliedIndex() == want
		})
	}

	appendEntries(0, 10)
	applied(10)

	// The leader's snapshot at 8 (8 commands applied), installed although
	// the follower's log reaches 10 and holds 8.
	install(t, lt, fAddr, hdr, 8)
	// The leader goes on from 10 (the follower's answers said it holds
	// it): the follower must hold and apply 9..11 again on the snapshot.
	appendEntries(10, 11)
	applied(11)
	held(t, logs, 9, 11)

	// A snapshot at 20, ahead of the log (it is emptied, as always), the
	// leader's 21..22, then the snapshot at 20 again: the log now begins
	// right after it (the sequence the storage nemesis's runs showed).
	install(t, lt, fAddr, hdr, 20)
	appendEntries(20, 22)
	applied(22)
	install(t, lt, fAddr, hdr, 20)
	appendEntries(22, 23)
	applied(23)
	held(t, logs, 21, 23)

	// The follower's own snapshot at 26 is the newest in its store when
	// the leader's at 22 is installed: what is kept follows the one
	// installed (raft re-applies from 23), not the newest.
	appendEntries(23, 26)
	applied(26)
	if err := r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	install(t, lt, fAddr, hdr, 22)
	appendEntries(26, 27)
	applied(27)
	held(t, logs, 22, 27)
}

// install sends the follower at addr a snapshot at index (term 1) of a
// countFSM that applied index commands.
func install(t *testing.T, lt *raft.InmemTransport, addr raft.ServerAddress, hdr raft.RPCHeader, index uint64) {
	t.Helper()
	members := raft.Configuration{Servers: []raft.Server{{ID: "leader", Address: "leader"}, {ID: "f", Address: addr}}}
	var data bytes.Buffer
	binary.Write(&data, binary.BigEndian, index)
	req := &raft.InstallSnapshotRequest{
		RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: 1, Leader: []byte("leader"),
		LastLogIndex: index, LastLogTerm: 1, Configuration: raft.EncodeConfiguration(members), ConfigurationIndex: 1,
		Size: int64(data.Len()),
	}
	var resp raft.InstallSnapshotResponse
	if err := lt.InstallSnapshot("f", addr, req, &resp, &data); err != nil || !resp.Success {
		t.Fatalf("install a snapshot at %d: %v, %+v", index, err, resp)
	}
}

// held fails the test unless logs holds entries from..to.
func held(t *testing.T, logs raft.LogStore, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Errorf("entry %d after the install: %v", i, err)
		}
	}
}

// The leader-log wrapper (leaderlog.go) keeps its durable index at what
// the wal kept in a deletion of the whole log: the entries past the
// snapshot are on disk, and the FSM, which applies them again, waits for
// that index. Lowered below them, those applies waited for the next write,
// and a Close in between for ever.
func TestLeaderLogDurableIndexFollowsWhatTheWALKeeps(t *testing.T) {
	logs, closeAll, _ := walLog(t, t.TempDir())
	defer closeAll()
	logs.(*durableWAL).installed = func() (uint64, uint64, bool) { return 8, 1, true } // raft installed a snapshot at 8
	l, err := newLeaderLog(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	storeBatch(t, l, 1, 10)

	if err := l.DeleteRange(1, 10); err != nil { // raft's removeOldLogs after an install
		t.Fatal(err)
	}
	if got := l.Durable(); got != 10 {
		t.Fatalf("durable index %d after the wal kept 8..10, want 10", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.waitDurable(ctx, 9); err != nil {
		t.Fatalf("waiting for entry 9, which the wal kept: %v", err)
	}

	// A deletion of the tail still lowers it.
	if err := l.DeleteRange(10, 10); err != nil {
		t.Fatal(err)
	}
	if got := l.Durable(); got != 9 {
		t.Fatalf("durable index %d after deleting entry 10, want 9", got)
	}
}
