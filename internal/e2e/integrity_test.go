package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	path := filepath.Join(c.Procs[victim].DataDir, "raft.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("db/39")) {
		t.Fatal("db/39 not in raft.db")
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte("db/39"), []byte("dX/39")), 0o600); err != nil {
		t.Fatal(err)
	}
	logBefore, _ := os.ReadFile(c.Procs[victim].LogPath)
	c.Start(victim)
	pid := c.Pid(victim)
	deadline = time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("leased with a corrupt raft.db is still running")
		}
		time.Sleep(50 * time.Millisecond)
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
