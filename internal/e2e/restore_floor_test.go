package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/ctl"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// Issue 13 §1, with the real tools: a scope first used after the backup
// was taken is unknown to the backup, yet tokens were issued in it before
// the cluster was lost. After leased --restore (default bump) its next
// token must beat every token issued before the loss, in every scope.
func TestRestoreBeatsTokensOfScopesTheBackupNeverSaw(t *testing.T) {
	c := startCluster(t, 3)
	v, epoch := restoreAfterLoss(t, c)
	for _, v := range v {
		t.Error(v)
	}
	// Every node holds the floor: the backup's highest token (2, in
	// jobs/old) plus the default bump, or the epoch's line if higher;
	// leasectl status shows it.
	floor := max(2+cluster.DefaultBumpTokens, (epoch-cluster.EpochBase)*cluster.EpochTokens)
	for i := range c.Procs {
		st, err := c.Status(i)
		if err != nil || st.TokenFloor != floor {
			t.Errorf("node %d: token floor %d (%v), want %d", i, st.GetTokenFloor(), err, floor)
		}
	}
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), []string{"--endpoints", strings.Join(c.Endpoints(), ","), "status"}, nil, &out, &errb)
	shown := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		shown = shown || len(f) == 3 && f[0] == "token" && f[1] == "floor" && f[2] == fmt.Sprint(floor)
	}
	if code != 0 || !shown {
		t.Errorf("leasectl status does not show token floor %d: exit %d, %s %s", floor, code, out.String(), errb.String())
	}
}

// restoreAfterLoss runs the disaster on c: grants in jobs/old, a backup
// with leasectl snapshot save, grants in ops/new (a scope the backup never
// sees) and jobs/old, the loss of every node (SIGKILL), a new cluster of
// leased --restore processes on new addresses and data dirs. It returns
// every grant after the restore whose token does not beat every token
// issued before the loss, and the restore's epoch.
func restoreAfterLoss(t *testing.T, c *testcluster.Cluster) (violations []string, epoch uint64) {
	t.Helper()
	highest := c.Cycle("jobs/old", 2)
	file := filepath.Join(t.TempDir(), "backup.lfb")
	var out, errb bytes.Buffer
	if code := ctl.Run(context.Background(), []string{"--endpoints", strings.Join(c.Endpoints(), ","), "snapshot", "save", file}, nil, &out, &errb); code != 0 {
		t.Fatalf("snapshot save: exit %d: %s %s", code, out.String(), errb.String())
	}
	// After the backup: a new scope, and more grants in the known one.
	highest = max(highest, c.Cycle("ops/new", 2), c.Cycle("jobs/old", 2))
	epoch = loseAndRestore(t, c, file)
	for _, res := range []string{"ops/new", "jobs/old", "never/seen"} {
		r, err := c.Acquire(res, 10*time.Second, "")
		if err != nil {
			t.Fatalf("acquire %s: %v", res, err)
		}
		if r.Lease.Token <= highest {
			violations = append(violations, fmt.Sprintf("after the restore, %s got token %d; tokens up to %d were issued before the loss", res, r.Lease.Token, highest))
		}
	}
	return violations, epoch
}
