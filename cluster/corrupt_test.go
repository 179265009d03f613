package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// waitAllApplied waits until every running node applied the leader's
// applied index.
func (tc *testCluster) waitAllApplied() {
	tc.t.Helper()
	_, l := tc.leader()
	want := l.AppliedIndex()
	eventually(tc.t, 10*time.Second, "every node applies the leader's index", func() bool {
		for _, n := range tc.nodes {
			if n != nil && n.AppliedIndex() < want {
				return false
			}
		}
		return true
	})
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
	tc.waitAllApplied()
	fi, _ := tc.follower()
	tc.stop(fi)
	path := filepath.Join(tc.cfgs[fi].DataDir, "raft.db")
	replaceInFile(t, path, []byte("db/39"), []byte("dX/39"))

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
	tc.waitAllApplied()
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
