package cluster

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// bufSink is a raft.SnapshotSink into memory.
type bufSink struct{ bytes.Buffer }

func (s *bufSink) ID() string    { return "test" }
func (s *bufSink) Cancel() error { return nil }
func (s *bufSink) Close() error  { return nil }

// A follower must never install a snapshot older than the state it has
// applied once the entries after that snapshot are gone from its log:
// hashicorp/raft would rewind its applied index to the snapshot's and the
// next commit panics on "log not found". The soak found it (seed 9: a
// member wiped and joined back took a local snapshot at 40979, compacting
// its log, then installed the leader's stale 40935, and panicked).
// Restore refuses such a snapshot and keeps the state; raft then fails the
// InstallSnapshot and the leader sends entries or a newer snapshot. While
// the log still holds those entries the rewind is harmless (raft applies
// them again) and the snapshot is taken, so the leader does not loop.
func TestRestoreRefusesASnapshotOlderThanTheAppliedState(t *testing.T) {
	m := newStateMachine(newHub(16), hclog.NewNullLogger(), nil)
	logs := raft.NewInmemStore()
	m.logs = logs
	apply := func(i uint64) {
		t.Helper()
		data, err := fsm.EncodeBatch(&fsmpb.Batch{NowNs: int64(i) * 1e9})
		if err != nil {
			t.Fatal(err)
		}
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
		if err := logs.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		if r, ok := m.Apply(l).(error); ok {
			t.Fatalf("apply %d: %v", i, r)
		}
	}
	snapshot := func() []byte {
		t.Helper()
		s, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var sink bufSink
		if err := s.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		return sink.Bytes()
	}
	for i := uint64(1); i <= 10; i++ {
		apply(i)
	}
	old := snapshot()
	for i := uint64(11); i <= 20; i++ {
		apply(i)
	}
	current := snapshot()
	// This node's own snapshot at 20 compacted its log up to 15.
	if err := logs.DeleteRange(1, 15); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(io.NopCloser(bytes.NewReader(old))); err == nil {
		t.Fatal("a snapshot at index 10 was restored over the state applied to 20, entries 11-15 gone from the log")
	}
	if m.applied.Load() != 20 || m.index.Load() != 20 {
		t.Fatalf("after the refused restore: applied %d, index %d, want 20", m.applied.Load(), m.index.Load())
	}
	// One at the applied index (a retried install) or later is restored.
	if err := m.Restore(io.NopCloser(bytes.NewReader(current))); err != nil {
		t.Fatalf("a snapshot at the applied index: %v", err)
	}
	apply(21)
	// With the entries after it still in the log, an older snapshot is
	// taken: raft applies 11-21 again (the harmless rewind).
	other := newStateMachine(newHub(16), hclog.NewNullLogger(), nil)
	full := raft.NewInmemStore()
	for i := uint64(11); i <= 21; i++ {
		if err := full.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogNoop}); err != nil {
			t.Fatal(err)
		}
	}
	other.logs = full
	other.index.Store(12)
	if err := other.Restore(io.NopCloser(bytes.NewReader(old))); err != nil || other.applied.Load() != 10 {
		t.Fatalf("a snapshot at 10 under a state at 12 whose log holds 11-21: applied %d, %v", other.applied.Load(), err)
	}
	// A fresh state machine (a node starting, or a new member) takes any.
	fresh := newStateMachine(newHub(16), hclog.NewNullLogger(), nil)
	if err := fresh.Restore(io.NopCloser(bytes.NewReader(old))); err != nil || fresh.applied.Load() != 10 {
		t.Fatalf("a fresh state machine restoring index 10: applied %d, %v", fresh.applied.Load(), err)
	}
}
