package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/ctl"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// The disaster-recovery path with the real tools: leasectl snapshot save,
// more grants, the cluster is lost, every founding node of a new cluster
// starts with leased --restore; the next token beats every token issued.
func TestLeasectlBackupAndLeasedRestoreBumpTokens(t *testing.T) {
	c := startCluster(t, 3)
	c.Cycle("jobs/dr", 3)
	file := filepath.Join(t.TempDir(), "backup.lfb")
	var out, errb bytes.Buffer
	if code := ctl.Run(context.Background(), []string{"--endpoints", strings.Join(c.Endpoints(), ","), "snapshot", "save", file}, nil, &out, &errb); code != 0 {
		t.Fatalf("snapshot save: exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.HasPrefix(out.String(), "saved "+file) {
		t.Fatalf("output %q", out.String())
	}
	highest := c.Cycle("jobs/dr", 3)
	epoch := loseAndRestore(t, c, file)
	r, err := c.Acquire("jobs/dr", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := max(3+cluster.DefaultBumpTokens, (epoch-cluster.EpochBase)*cluster.EpochTokens) + 1; r.Lease.Token <= highest || r.Lease.Token != want {
		t.Fatalf("token after restore %d, highest ever issued %d", r.Lease.Token, highest)
	}
}

// loseAndRestore kills every node of c with SIGKILL and starts a new
// cluster of the same ids on fresh addresses and empty data dirs, each
// restored from the backup file, and waits for its leader. It returns the
// restore epoch it gave them.
func loseAndRestore(t *testing.T, c *testcluster.Cluster, file string) (epoch uint64) {
	t.Helper()
	for i := range c.Procs {
		c.Kill(i, syscall.SIGKILL)
	}

	addrs := testcluster.FreeAddrs(t, 3)
	epoch = uint64(time.Now().Unix()) // read once, the same on every founding node
	var peers []string
	for i, a := range addrs {
		peers = append(peers, "n"+string(rune('1'+i))+"="+a)
	}
	for i, p := range c.Procs {
		p.Addr = addrs[i]
		p.DataDir = filepath.Join(t.TempDir(), p.ID)
		p.Args = append([]string{"--id", p.ID, "--listen", p.Addr, "--data-dir", p.DataDir,
			"--bootstrap", strings.Join(peers, ","), "--restore", file, "--restore-epoch", strconv.FormatUint(epoch, 10)}, testcluster.Defaults...)
		c.Start(i)
	}
	c.Leader()
	return epoch
}
