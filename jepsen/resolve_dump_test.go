package jepsen_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
	"github.com/leasefence/leasefence/jepsen"
	"github.com/leasefence/leasefence/jepsen/history"
)

var t0 = time.Unix(1_000_000, 0)

func leaseID(b byte) []byte {
	id := make([]byte, fsm.LeaseIDLen)
	id[0], id[15] = 0xab, b
	return id
}

func acquireEntry(t *testing.T, now time.Duration, res, rid string, id byte) []byte {
	t.Helper()
	b, err := fsm.EncodeBatch(&fsmpb.Batch{NowNs: int64(now), SkewMarginNs: int64(300 * time.Millisecond), DedupKeepNs: int64(time.Hour),
		Commands: []*fsmpb.Command{{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
			Resource: res, Holder: "w", TtlNs: int64(10 * time.Second), RequestId: rid, LeaseId: leaseID(id)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeLog writes entries at indexes first, first+1, ... into dir/raft.db,
// the i-th stamped appendedAt + i ms, as a leader would.
func writeLog(t *testing.T, dir string, first uint64, appendedAt time.Time, entries ...[]byte) {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{Path: dir + "/raft.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var logs []*raft.Log
	for i, e := range entries {
		logs = append(logs, &raft.Log{Index: first + uint64(i), Term: 1, Type: raft.LogCommand, Data: e, AppendedAt: appendedAt.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// writeSnapshot writes st as the node's snapshot at index, in the node's
// format (8-byte index, then the fsm snapshot).
func writeSnapshot(t *testing.T, dir string, index uint64, st *fsm.State) {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], index)
	sink.Write(hdr[:])
	if _, err := st.Snapshot().WriteTo(sink); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

func dump(t *testing.T, node, dir string, applied uint64) *jepsen.NodeLog {
	t.Helper()
	var out bytes.Buffer
	if err := cluster.DumpLog(dir, &out); err != nil {
		t.Fatalf("dump-log: %v", err)
	}
	n, err := jepsen.ReadLogDump(node, &out)
	if err != nil {
		t.Fatal(err)
	}
	n.Applied = applied
	return n
}

// unknownAcquire is an acquire invoked at inv whose outcome the client
// never learnt.
func unknownAcquire(op string, inv time.Time) []history.Record {
	return []history.Record{
		{Kind: history.Invoke, Worker: "w", Op: op, Type: history.OpAcquire, Resource: "jr/0", RequestID: jepsen.RequestIDOf(op), TimeNs: inv.UnixNano()},
		{Kind: history.Complete, Worker: "w", Op: op, Type: history.OpAcquire, Resource: "jr/0", Result: history.Unknown, Error: "timeout", TimeNs: inv.Add(5 * time.Second).UnixNano()},
	}
}

func completion(t *testing.T, h []history.Record, op string) history.Record {
	t.Helper()
	for _, r := range h {
		if r.Op == op && r.Kind == history.Complete {
			return r
		}
	}
	t.Fatalf("no completion of %s", op)
	return history.Record{}
}

// TestUnknownAcquiresAreResolvedFromADumpedRaftLog runs Resolve over what
// cluster.DumpLog (leased dump-log) writes for Raft logs built here: an
// end-to-end test of the schema both share (internal/dumplog). It is the
// one place the harness's tests reach server packages (cluster, fsm).
func TestUnknownAcquiresAreResolvedFromADumpedRaftLog(t *testing.T) {
	// A log never compacted: w1-1-a granted at 1 (token 1), w2-1-a refused
	// as held at 2, a tick at 3, and w4-1-a at 4, above the applied index.
	full := t.TempDir()
	writeLog(t, full, 1, t0,
		acquireEntry(t, time.Second, "jr/0", jepsen.RequestIDOf("w1-1-a"), 1),
		acquireEntry(t, 2*time.Second, "jr/0", jepsen.RequestIDOf("w2-1-a"), 2),
		acquireEntry(t, 3*time.Second, "jr/9", "", 3),
		acquireEntry(t, 4*time.Second, "jr/1", jepsen.RequestIDOf("w4-1-a"), 4))
	var h []history.Record
	for _, op := range []string{"w1-1-a", "w2-1-a", "w3-1-a", "w4-1-a"} {
		h = append(h, unknownAcquire(op, t0.Add(-time.Second))...)
	}
	h = append(h, history.Record{Kind: history.Invoke, Worker: "w", Op: "w1-1-r", Type: history.OpRelease, Lease: "x"},
		history.Record{Kind: history.Complete, Worker: "w", Op: "w1-1-r", Type: history.OpRelease, Lease: "x", Result: history.Unknown})
	res, stats := jepsen.Resolve(h, []*jepsen.NodeLog{dump(t, "n1", full, 3)}, 1, 0)

	if r := completion(t, res, "w1-1-a"); r.Result != history.OK || r.Token != 1 || r.Lease != api.FormatLeaseID(leaseID(1)) || r.ResolvedFrom != jepsen.ResolvedFromRaftLog {
		t.Errorf("applied acquire: %+v", r)
	}
	if r := completion(t, res, "w2-1-a"); r.Result != history.Fail || !strings.Contains(r.Error, "only refused") {
		t.Errorf("refused acquire: %+v", r)
	}
	if r := completion(t, res, "w3-1-a"); r.Result != history.Fail || !strings.Contains(r.Error, "absent") || r.ResolvedFrom == "" {
		t.Errorf("absent acquire, log covers its span: %+v", r)
	}
	if r := completion(t, res, "w4-1-a"); r.Result != history.Unknown || r.ResolvedFrom != "" {
		t.Errorf("acquire only above the applied index: %+v", r)
	}
	if r := completion(t, res, "w1-1-r"); r.Result != history.Unknown {
		t.Errorf("release: %+v", r)
	}
	want := jepsen.ResolveStats{Unknown: 4, ResolvedOK: 1, ResolvedNotApplied: 2, StillUnknown: 1, Uncommitted: 1, UnknownOther: 1, Logs: 1}
	if stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	if h[3].Result != history.Unknown {
		t.Error("Resolve changed its input")
	}

	// Acknowledged acquires are cross-checked against the log.
	acked := func(op string, token uint64, lease string) []history.Record {
		r := unknownAcquire(op, t0)
		r[1].Result, r[1].Token, r[1].Lease = history.OK, token, lease
		return r
	}
	h = append(acked("w1-1-a", 1, api.FormatLeaseID(leaseID(1))), acked("w2-1-a", 1, "other")...)
	h = append(h, acked("w9-1-a", 9, "nine")...)
	_, stats = jepsen.Resolve(h, []*jepsen.NodeLog{dump(t, "n1", full, 3)}, 1, 0)
	if stats.AckedInLogs != 1 || stats.AckedNotInLogs != 2 || stats.AckedMismatch != 0 {
		t.Errorf("cross-check %+v", stats)
	}
	h = acked("w1-1-a", 2, "another")
	if _, stats = jepsen.Resolve(h, []*jepsen.NodeLog{dump(t, "n1", full, 3)}, 1, 0); stats.AckedMismatch != 1 || !strings.Contains(stats.AckedMismatchExample, "token 2") {
		t.Errorf("mismatch %+v", stats)
	}

	// A compacted log: a snapshot at 10 remembers w5-1-a; the log keeps
	// 11.. appended at t0+10s. w6-1-a, invoked at t0+5s and absent, may
	// have been compacted away: it stays unknown. w7-1-a, invoked at
	// t0+20s and absent, is not applied.
	compacted := t.TempDir()
	st := fsm.New()
	if _, err := st.Apply(acquireEntry(t, time.Second, "jr/0", jepsen.RequestIDOf("w5-1-a"), 5)); err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, compacted, 10, st)
	writeLog(t, compacted, 11, t0.Add(10*time.Second),
		acquireEntry(t, 11*time.Second, "jr/3", "", 6))
	h = nil
	h = append(h, unknownAcquire("w5-1-a", t0)...)
	h = append(h, unknownAcquire("w6-1-a", t0.Add(5*time.Second))...)
	h = append(h, unknownAcquire("w7-1-a", t0.Add(20*time.Second))...)
	n := dump(t, "n1", compacted, 11)
	if n.Range.SnapshotIndex != 10 || n.Range.Replayed != 11 {
		t.Fatalf("range %+v", n.Range)
	}
	res, stats = jepsen.Resolve(h, []*jepsen.NodeLog{n}, 1, 0)
	if r := completion(t, res, "w5-1-a"); r.Result != history.OK || r.Token != 1 || r.Lease != api.FormatLeaseID(leaseID(5)) {
		t.Errorf("acquire remembered by the snapshot: %+v", r)
	}
	if r := completion(t, res, "w6-1-a"); r.Result != history.Unknown {
		t.Errorf("absent acquire, log compacted past its invocation: %+v", r)
	}
	if r := completion(t, res, "w7-1-a"); r.Result != history.Fail {
		t.Errorf("absent acquire invoked after the log's first entry: %+v", r)
	}
	if stats.ResolvedOK != 1 || stats.ResolvedNotApplied != 1 || stats.Uncovered != 1 {
		t.Errorf("stats %+v", stats)
	}

	// Coverage needs a majority: one covering log of three is not enough.
	res, _ = jepsen.Resolve(unknownAcquire("w3-1-a", t0.Add(-time.Second)), []*jepsen.NodeLog{dump(t, "n1", full, 3), n}, 3, 0)
	if r := completion(t, res, "w3-1-a"); r.Result != history.Unknown {
		t.Errorf("absent acquire covered by one log of three: %+v", r)
	}
}
