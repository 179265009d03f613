package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/internal/testcluster"
)

// Issue 14 §3: three `leasectl members add xN ADDR` of addresses where
// nothing listens froze a cluster for good (6 voters, 3 unreachable, no
// quorum; even `members remove` timed out). Now each add is refused, the
// membership stays as it was, and the cluster keeps serving.
func TestAddsOfUnreachableMembersLeaveTheClusterServing(t *testing.T) {
	c := startCluster(t, 3)
	before := c.Cycle("members/unreachable", 2)
	for i, addr := range testcluster.FreeAddrs(t, 3) {
		code, out := leasectl(t, c.Endpoints(), "members", "add", fmt.Sprintf("x%d", i+1), addr)
		if code == 0 || !strings.Contains(out, "does not answer") {
			t.Fatalf("members add of unreachable %s: exit %d: %s", addr, code, out)
		}
	}
	code, out := leasectl(t, c.Endpoints(), "members", "list")
	if code != 0 || strings.Contains(out, "x1") || strings.Count(out, "voter") != 3 {
		t.Fatalf("members list after refused adds: exit %d:\n%s", code, out)
	}
	if got := c.Cycle("members/unreachable", 1); got != before+1 {
		t.Fatalf("token %d after the refused adds, want %d", got, before+1)
	}
	// A bad id or address is refused before anything is dialled.
	for _, args := range [][]string{{"members", "add", "bad,id", c.Procs[0].Addr}, {"members", "add", "n9", "nonsense"}} {
		if code, out := leasectl(t, c.Endpoints(), args...); code == 0 || !strings.Contains(out, "invalid") {
			t.Fatalf("%v: exit %d: %s", args, code, out)
		}
	}
}
