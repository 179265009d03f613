package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc64"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// Issue 14 §1 with real processes: a stopped follower's raft.db has one
// applied command's resource name changed (db/39 -> dX/39, same length,
// every copy in the file). Started again, leased refuses: it exits with a
// message naming raft.db, the entry's index and what to do, instead of
// catching up on a state that differs from the leader's. The rest keeps
// serving, and db/39 stays held.
func TestCorruptRaftDBEntryStopsLeasedWithAMessage(t *testing.T) {
	c := startCluster(t, 3)
	held, err := c.Acquire("db/39", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("db/40", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	victim := (c.Leader() + 1) % 3
	deadline := time.Now().Add(20 * time.Second)
	for {
		ls, err1 := c.Status(c.Leader())
		vs, err2 := c.Status(victim)
		if err1 == nil && err2 == nil && vs.AppliedIndex >= ls.AppliedIndex {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("victim did not apply the grants")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Kill(victim, syscall.SIGTERM)
	// The log: raft.db, or wal/'s segment files with LEASEFENCE_LOG_STORE=wal.
	path := filepath.Join(c.Procs[victim].DataDir, "raft.db")
	files := []string{path}
	if segs, _ := filepath.Glob(filepath.Join(c.Procs[victim].DataDir, "wal", "*.wal")); len(segs) > 0 {
		path, files = filepath.Join(c.Procs[victim].DataDir, "wal"), segs
	}
	found := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("db/39")) {
			continue
		}
		found = true
		if err := os.WriteFile(f, bytes.ReplaceAll(data, []byte("db/39"), []byte("dX/39")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !found {
		t.Fatalf("db/39 not in %s", path)
	}
	logBefore, _ := os.ReadFile(c.Procs[victim].LogPath)
	c.Start(victim)
	if !c.WaitExit(victim, 30*time.Second) {
		t.Fatal("leased with a corrupt raft.db is still running")
	}
	logAll, _ := os.ReadFile(c.Procs[victim].LogPath)
	out := string(logAll[len(logBefore):])
	for _, want := range []string{"corrupt log entry", path, "checksum mismatch", "members remove " + c.Procs[victim].ID, "--join"} {
		if !strings.Contains(out, want) {
			t.Errorf("leased's output does not say %q:\n%s", want, out)
		}
	}
	c.Kill(victim, syscall.SIGKILL) // reap it in the harness
	_, err = c.Acquire("db/39", time.Minute, "")
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("db/39 held by token %d: another acquire got %v", held.Lease.Token, err)
	}
}

// rewriteSnapshotConsistently replaces old by new (same length) in the
// snapshot dir's state.bin and rewrites meta.json's CRC-64 to match, as a
// bug in the snapshot writer would: every checksum passes, the state is
// wrong.
func rewriteSnapshotConsistently(t *testing.T, dir string, old, new []byte) {
	t.Helper()
	state := filepath.Join(dir, "state.bin")
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, old) {
		t.Fatalf("%q not in %s", old, state)
	}
	data = bytes.ReplaceAll(data, old, new)
	if err := os.WriteFile(state, data, 0o600); err != nil {
		t.Fatal(err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(data)
	metaPath := filepath.Join(dir, "meta.json")
	raw, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var meta map[string]any
	if err := dec.Decode(&meta); err != nil {
		t.Fatal(err)
	}
	meta["CRC"] = h.Sum(nil) // []byte: base64, as raft writes it
	out, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(metaPath, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue 14 §1 (b) with real processes: a follower's newest snapshot is
// rewritten with a wrong holder and a matching CRC (every checksum
// passes). Restarted, it restores the wrong state and catches up; at the
// next state checkpoint the voters compare hashes and it fences itself:
// state_corrupt in its status, every lease call refused with Unavailable,
// never the leader, and a restart refuses until it is replaced.
func TestReplicaRestoredFromAWrongSnapshotFencesItself(t *testing.T) {
	// Many trailing logs: the victim must catch up from the log on top of
	// its own (rewritten) snapshot, not be sent a fresh one by the leader.
	c := startCluster(t, 3, "--snapshot-threshold", "20", "--snapshot-threshold-max", "20", "--trailing-logs", "100000",
		"--snapshot-interval", "200ms", "--state-check-every", "8", "--state-check-poll", "200ms")
	if _, err := c.Acquire("held/1", 10*time.Minute, "held-1"); err != nil {
		t.Fatal(err)
	}
	victim := (c.Leader() + 1) % 3
	var snaps []string
	deadline := time.Now().Add(60 * time.Second)
	for len(snaps) == 0 {
		c.Cycle("cycle", 10)
		snaps, _ = filepath.Glob(filepath.Join(c.Procs[victim].DataDir, "snapshots", "*", "state.bin"))
		if time.Now().After(deadline) {
			t.Fatal("no snapshot on the victim")
		}
	}
	c.Kill(victim, syscall.SIGTERM)
	snaps, _ = filepath.Glob(filepath.Join(c.Procs[victim].DataDir, "snapshots", "*", "state.bin"))
	for _, s := range snaps {
		rewriteSnapshotConsistently(t, filepath.Dir(s), []byte("testcluster"), []byte("testclusteX"))
	}
	c.Start(victim)
	deadline = time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		// Writes, so that checkpoints follow. Each carries a request id:
		// the victim may lead for a moment before it knows it is corrupt,
		// and a write it had in flight when it handed leadership away is
		// indeterminate (retried by request id, never granted twice).
		if r, err := c.Acquire("cycle", 10*time.Second, fmt.Sprintf("cycle-%d", i)); err == nil {
			_ = c.Release(r.Lease.Id)
		}
		st, err := c.Status(victim)
		if err == nil && st.StateCorrupt != "" {
			t.Logf("victim: %s", st.StateCorrupt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim with a wrong state did not fence itself (applied %d, %v)", st.GetAppliedIndex(), err)
		}
	}
	for i := range c.Procs {
		if i == victim {
			continue
		}
		if st, err := c.Status(i); err != nil || st.StateCorrupt != "" {
			t.Fatalf("healthy node %d: %v %v", i, st, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Lease(victim).Get(ctx, &api.GetRequest{Resource: "held/1", Stale: true})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("stale read on the corrupt node: %v", err)
	}
	if st, _ := c.Status(victim); st.State == "leader" {
		t.Fatal("the corrupt node leads")
	}
	// The others still serve; the held lease is intact.
	if _, err := c.Acquire("held/1", time.Minute, ""); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("held/1 after the fencing: %v", err)
	}
	c.Kill(victim, syscall.SIGTERM)
	logBefore, _ := os.ReadFile(c.Procs[victim].LogPath)
	c.Start(victim)
	if !c.WaitExit(victim, 30*time.Second) {
		t.Fatal("a node marked corrupt started again")
	}
	logAll, _ := os.ReadFile(c.Procs[victim].LogPath)
	if out := string(logAll[len(logBefore):]); !strings.Contains(out, "STATE_CORRUPT") || !strings.Contains(out, "members remove") {
		t.Fatalf("restart output:\n%s", out)
	}
	c.Kill(victim, syscall.SIGKILL)
}
