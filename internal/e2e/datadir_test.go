package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A member whose raft.db was emptied (truncate -s 0) or cut short
// (truncated to half), restarted with --bootstrap still on its command line
// as deploy/docker-compose.yml does: the process refuses to start with a
// message naming the file and what to do, never as a fresh node that forgot
// its term and vote and never with a panic; the file is left as it was and
// the other members keep serving.
func TestDamagedRaftDBIsRefusedAtStartWithBootstrapStillGiven(t *testing.T) {
	c := startCluster(t, 3)
	c.Cycle("datadir/e2e", 200)
	li := c.Leader()
	cases := []struct {
		victim int
		size   func(int64) int64
		want   []string
	}{
		{(li + 1) % 3, func(int64) int64 { return 0 }, []string{"node-identity.json", "missing or empty", "--join"}},
		{(li + 2) % 3, func(n int64) int64 { return n / 2 }, []string{"raft.db", "truncated", "replace"}},
	}
	for _, tc := range cases {
		p := c.Procs[tc.victim]
		c.Kill(tc.victim, syscall.SIGTERM)
		db := filepath.Join(p.DataDir, "raft.db")
		fi, err := os.Stat(db)
		if err != nil {
			t.Fatal(err)
		}
		size := tc.size(fi.Size())
		if err := os.Truncate(db, size); err != nil {
			t.Fatal(err)
		}
		os.Truncate(p.LogPath, 0)
		c.Start(tc.victim)
		if !c.WaitExit(tc.victim, 30*time.Second) {
			b, _ := os.ReadFile(p.LogPath)
			t.Fatalf("%s started on a raft.db of %d bytes:\n%s", p.ID, size, b)
		}
		b, _ := os.ReadFile(p.LogPath)
		out := string(b)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s refusal does not say %q:\n%s", p.ID, w, out)
			}
		}
		if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
			t.Fatalf("%s panicked:\n%s", p.ID, out)
		}
		if fi, err := os.Stat(db); err != nil || fi.Size() != size {
			t.Fatalf("%s: the refused start changed raft.db: %v %v", p.ID, fi, err)
		}
		c.Kill(tc.victim, syscall.SIGKILL) // reap
		if tc.victim == (li+1)%3 {
			// Two of three still serve, tokens continue.
			c.Cycle("datadir/e2e", 1)
		}
	}
}
