package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasefence/leasefence/internal/ctl"
	"github.com/leasefence/leasefence/internal/testcluster"
)

func leasectl(t *testing.T, endpoints []string, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), append([]string{"--endpoints", strings.Join(endpoints, ",")}, args...), nil, &out, &errb)
	return code, out.String() + errb.String()
}

// Replacing a dead node with the documented procedure: remove it, start a
// fresh node with --join; the cluster is three live voters again and
// tokens continue.
func TestDeadNodeIsReplacedThroughRemoveAndJoin(t *testing.T) {
	c := startCluster(t, 3)
	before := c.Cycle("jobs/replace", 3)
	dead := (c.Leader() + 1) % 3
	c.Kill(dead, syscall.SIGKILL)
	live := []string{}
	for i, p := range c.Procs {
		if i != dead {
			live = append(live, p.Addr)
		}
	}
	if code, out := leasectl(t, live, "members", "remove", c.Procs[dead].ID); code != 0 {
		t.Fatalf("members remove: %d %s", code, out)
	}
	// The replacement: a new id, a new address, an empty data dir.
	p := c.Procs[dead]
	p.ID, p.Addr = "n4", testcluster.FreeAddrs(t, 1)[0]
	p.DataDir = filepath.Join(t.TempDir(), "n4")
	p.Args = append([]string{"--id", "n4", "--listen", p.Addr, "--data-dir", p.DataDir, "--join", live[0]}, testcluster.Defaults...)
	c.Start(dead)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out := leasectl(t, live, "members", "list")
		if code == 0 && strings.Contains(out, "n4") && strings.Count(out, "voter") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n4 never became a member: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Losing another original node now still leaves a quorum (n4 counts).
	other := (dead + 1) % 3
	c.Kill(other, syscall.SIGKILL)
	if got := c.Cycle("jobs/replace", 1); got != before+1 {
		t.Fatalf("token %d after replacement, want %d", got, before+1)
	}
}
