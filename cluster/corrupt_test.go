package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// replaceInFile replaces every occurrence of old in the file with new (same
// length), as an operator's sed or a bad disk would, and returns how many
// it replaced. bbolt rewrites pages copy-on-write, so a name may also sit
// in a free page: every copy is changed.
func replaceInFile(t *testing.T, path string, old, new []byte) int {
	t.Helper()
	if len(old) != len(new) {
		t.Fatal("replacement must keep the length")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := bytes.Count(data, old)
	if n == 0 {
		t.Fatalf("%q not found in %s", old, path)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(data, old, new), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFlippedByteInRaftDBStopsTheNodeAtStart reproduces issue 14 §1: a
// follower's raft.db has one applied command's resource name changed
// (db/39 -> dX/39, same length). Started again, it must refuse with a
// message naming the file, the index and what to do, not catch up on a
// state that differs from the leader's.
func TestFlippedByteInRaftDBStopsTheNodeAtStart(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	c := tc.client(0)
	for _, res := range []string{"db/38", "db/39", "db/40"} {
		if _, err := c.Acquire(ctx, acquireReq(res, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	tc.waitAllApplied(t)
	fi, _ := tc.follower()
	tc.stop(fi)
	path := logPathOf(tc.cfgs[fi]) // raft.db, or wal/ (LEASEFENCE_LOG_STORE=wal)
	replaceInLog(t, path, []byte("db/39"), []byte("dX/39"))

	n, err := Start(tc.cfgs[fi])
	if err == nil {
		tc.nodes[fi] = n
		t.Fatal("a node with a corrupt raft.db started")
	}
	var ce *CorruptLogError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorruptStore) {
		t.Fatalf("want *CorruptLogError, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{path, "entry", "members remove", "--join"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if ce.Index == 0 {
		t.Errorf("no index in %+v", ce)
	}
	// The rest of the cluster keeps serving, and db/39 is still held.
	li, _ := tc.leader()
	_, err = tc.client(li).Acquire(ctx, acquireReq("db/39", 10*time.Second))
	heldDetail(t, err)
}

// TestFlippedByteInSnapshotStopsTheNodeAtStart: a byte changed in a
// node's newest snapshot is found by the snapshot store's CRC before
// anything is restored; the node refuses to start, naming the file.
func TestFlippedByteInSnapshotStopsTheNodeAtStart(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	c := tc.client(0)
	if _, err := c.Acquire(ctx, acquireReq("snapdb/39", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	tc.waitAllApplied(t)
	fi, f := tc.follower()
	if err := f.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	tc.stop(fi)
	states, _ := filepath.Glob(filepath.Join(tc.cfgs[fi].DataDir, "snapshots", "*", "state.bin"))
	if len(states) != 1 {
		t.Fatalf("snapshots: %v", states)
	}
	replaceInFile(t, states[0], []byte("snapdb/39"), []byte("snapdX/39"))

	n, err := Start(tc.cfgs[fi])
	if err == nil {
		tc.nodes[fi] = n
		t.Fatal("a node with a corrupt snapshot started")
	}
	if !errors.Is(err, ErrCorruptStore) {
		t.Fatalf("want ErrCorruptStore, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{filepath.Dir(states[0]), "members remove", "--join"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

// TestCheckSnapshotsSetsACorruptOneAsideOnlyWhenTheLogCanRebuild: with the
// newest snapshot corrupt, a node may start from the older one only when
// its log still holds every entry after it; otherwise it refuses. Real
// snapshot files (raft's file store and its CRC).
func TestCheckSnapshotsSetsACorruptOneAsideOnlyWhenTheLogCanRebuild(t *testing.T) {
	dir := t.TempDir()
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, index := range []uint64{10, 20} {
		sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(sink, "state at %d, with some bytes to change", index)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	logs := raft.NewInmemStore()
	log := testLogger(t, "snapshots")
	if err := checkSnapshots(store, logs, dir, "n1", log); err != nil {
		t.Fatalf("intact snapshots: %v", err)
	}
	metas, _ := store.List()
	replaceInFile(t, filepath.Join(dir, "snapshots", metas[0].ID, "state.bin"), []byte("state at 20"), []byte("state at 21"))

	// The log starts after the older snapshot: nothing can rebuild.
	if err := logs.StoreLogs([]*raft.Log{{Index: 15, Term: 1, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptSnapshotError
	if err := checkSnapshots(store, logs, dir, "n1", log); !errors.As(err, &ce) || !strings.Contains(err.Error(), metas[0].ID) ||
		!strings.Contains(err.Error(), "log starts at index 15") {
		t.Fatalf("newest corrupt, log from 15: %v", err)
	}
	// The log holds everything after the older snapshot: start from it.
	logs = raft.NewInmemStore()
	if err := logs.StoreLogs([]*raft.Log{{Index: 11, Term: 1, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshots(store, logs, dir, "n1", log); err != nil {
		t.Fatalf("newest corrupt, log from 11: %v", err)
	}
	// Both corrupt: refuse.
	replaceInFile(t, filepath.Join(dir, "snapshots", metas[1].ID, "state.bin"), []byte("state at 10"), []byte("state at 11"))
	if err := checkSnapshots(store, logs, dir, "n1", log); !errors.Is(err, ErrCorruptStore) {
		t.Fatalf("both corrupt: %v", err)
	}
}

// Two snapshots created at one index within one millisecond get their own
// names: raft's file store names them term-index-milliseconds, and two
// with one name wrote into one directory and corrupted each other (a node
// stopped on the CRC mismatch in a storage-nemesis run: raft snapshotted
// the state an installed snapshot gave it while the leader sent that
// snapshot again).
func TestSnapshotsCreatedTogetherGetTheirOwnNames(t *testing.T) {
	files, err := raft.NewFileSnapshotStoreWithLogger(t.TempDir(), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	store := &checkedSnapshotStore{SnapshotStore: files, log: hclog.NewNullLogger()}
	_, tr := raft.NewInmemTransport("n1")
	for range 10 {
		a, err := store.Create(raft.SnapshotVersionMax, 7, 1, raft.Configuration{}, 1, tr)
		if err != nil {
			t.Fatal(err)
		}
		b, err := store.Create(raft.SnapshotVersionMax, 7, 1, raft.Configuration{}, 1, tr)
		if err != nil {
			t.Fatal(err)
		}
		a.Cancel()
		b.Cancel()
		if a.ID() == b.ID() {
			t.Fatalf("two snapshots created together are both named %s", a.ID())
		}
	}
}
