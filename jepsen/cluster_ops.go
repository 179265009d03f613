package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// What *Cluster does only for the nemeses (nemesis.Cluster): members,
// backups and restores, the nodes' states.

// DataDir returns node id's data dir.
func (c *Cluster) DataDir(id string) string { return filepath.Join(c.dir, id) }

// withoutFlags returns args without each of the named flags and the value
// that follows it.
func withoutFlags(args []string, flags ...string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if slices.Contains(flags, args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// leaderClient returns a ClusterService client on the leader.
func (c *Cluster) leaderClient(ctx context.Context) (api.ClusterServiceClient, error) {
	l := c.Leader(ctx)
	if l == "" {
		return nil, fmt.Errorf("no leader")
	}
	cc, err := c.conn(c.addrs[c.byID[l]])
	if err != nil {
		return nil, err
	}
	return api.NewClusterServiceClient(cc), nil
}

// RemoveMember asks the leader to remove node id from the configuration.
func (c *Cluster) RemoveMember(ctx context.Context, id string) error {
	var err error
	for i := 0; i < 10; i++ {
		var cs api.ClusterServiceClient
		if cs, err = c.leaderClient(ctx); err == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = cs.Remove(rctx, &api.RemoveRequest{Id: id})
			cancel()
			if err == nil {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return err
}

// Rejoin starts node id again from an empty data dir, joining through the
// leader (or any other node) instead of bootstrapping.
func (c *Cluster) Rejoin(ctx context.Context, id string) error {
	p := c.Proc(id)
	via := ""
	if l := c.Leader(ctx); l != "" && l != id {
		via = c.addrs[c.byID[l]]
	}
	for i, other := range c.ids {
		if via == "" && other != id {
			via = c.addrs[i]
		}
	}
	p.Args = append(withoutFlags(p.Args, "--bootstrap", "--join"), "--join", via)
	return p.Start()
}

// Founders implements nemesis.Members: every node founded the cluster
// (the harness starts no node later; member-unreachable adds addresses,
// not processes).
func (c *Cluster) Founders() []string { return c.Nodes() }

// RestartFounder implements nemesis.Members: node id starts again on its
// address and data dir with the --bootstrap list the cluster was founded
// with (every node's id=address), not --join.
func (c *Cluster) RestartFounder(id string) error {
	p := c.Proc(id)
	p.Args = append(withoutFlags(p.Args, "--bootstrap", "--join"), "--bootstrap", c.bootstrapList())
	return p.Start()
}

// bootstrapList is the --bootstrap value the cluster is founded with:
// every node's id=address, in the nodes' order.
func (c *Cluster) bootstrapList() string {
	var peers []string
	for i, id := range c.ids {
		peers = append(peers, fmt.Sprintf("%s=%s", id, c.addrs[i]))
	}
	return strings.Join(peers, ",")
}

// WaitMembers waits up to 20 s until the leader lists want members and
// id is (present) or is not (!present) among them.
func (c *Cluster) WaitMembers(ctx context.Context, want int, id string, present bool) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l := c.Leader(ctx)
		if l == "" {
			continue
		}
		st, err := c.Status(ctx, l)
		if err != nil {
			continue
		}
		has := false
		for _, m := range st.Members {
			has = has || m.Id == id
		}
		if len(st.Members) == want && has == present {
			return true
		}
	}
	return false
}

// WaitCaughtUp waits up to 20 s until node id has applied what the leader
// had committed when the wait began.
func (c *Cluster) WaitCaughtUp(ctx context.Context, id string) bool {
	var target uint64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if target == 0 {
			if l := c.Leader(ctx); l != "" {
				if st, err := c.Status(ctx, l); err == nil {
					target = st.CommitIndex
				}
			}
			continue
		}
		if st, err := c.Status(ctx, id); err == nil && st.AppliedIndex >= target {
			return true
		}
	}
	return false
}

// join asks the leader to add a voter id at addr.
func (c *Cluster) Join(ctx context.Context, id, addr string) error {
	cs, err := c.leaderClient(ctx)
	if err != nil {
		return err
	}
	jctx, cancel := context.WithTimeout(ctx, memberAddTimeout)
	defer cancel()
	_, err = cs.Join(jctx, &api.JoinRequest{Id: id, Addr: addr})
	return err
}

// memberAddTimeout bounds one Join call of the nemesis: the leader's probe
// of the new member takes up to 2 s (cluster.joinProbeTimeout).
const memberAddTimeout = 10 * time.Second

// RemoveBounded asks the leader to remove member id: three tries of 5 s at
// most (a cluster without a quorum cannot remove anything). A member the
// leader does not know counts as removed.
func (c *Cluster) RemoveBounded(ctx context.Context, id string) error {
	var err error
	for i := 0; i < 3; i++ {
		var cs api.ClusterServiceClient
		if cs, err = c.leaderClient(ctx); err == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = cs.Remove(rctx, &api.RemoveRequest{Id: id})
			cancel()
			if err == nil || status.Code(err) == codes.NotFound {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// Backup writes a backup of the cluster (ClusterService.Snapshot, as
// `leasectl snapshot save` does) to path and returns the Raft index it
// reflects.
func (c *Cluster) Backup(ctx context.Context, path string) (uint64, error) {
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		cs, err := c.leaderClient(ctx)
		if err == nil {
			var index uint64
			if index, err = c.backupFrom(ctx, cs, path); err == nil {
				return index, nil
			}
		}
		last = err
		if !sleepCtx(ctx, 300*time.Millisecond) {
			break
		}
	}
	return 0, fmt.Errorf("backup: %w", last)
}

func (c *Cluster) backupFrom(ctx context.Context, cs api.ClusterServiceClient, path string) (uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := cs.Snapshot(sctx, &api.SnapshotRequest{})
	if err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var index uint64
	for {
		ch, err := stream.Recv()
		if err != nil {
			return 0, err
		}
		if _, err := f.Write(ch.Data); err != nil {
			return 0, err
		}
		index = ch.Index
		if ch.Sha256 != "" { // the last chunk
			return index, f.Sync()
		}
	}
}

// RestoreAll loses the whole cluster and starts a new one from backup:
// it kills every node (SIGKILL), moves their data dirs under lostDir, and
// starts every node again on its address with an empty data dir,
// bootstrapping the same members with --restore backup (the default
// bump) and one --restore-epoch. It waits up to 30 s for a leader. A
// non-empty odd names a node that gets an epoch nemesis.MismatchEpochSkew
// seconds later (its operator read the clock again) and is started 2 s
// before the others (NemRestoreMismatch): with the cluster id check it is
// kept out and cannot lead; without it, it usually wins the first
// election, and the others apply its grants from another floor.
func (c *Cluster) RestoreAll(ctx context.Context, backup, lostDir, odd string) error {
	for _, p := range c.procs {
		p.Kill(syscall.SIGKILL, 10*time.Second)
	}
	if err := os.MkdirAll(lostDir, 0o755); err != nil {
		return err
	}
	// The restore's epoch, read once: the same on every founding node,
	// and later than any earlier restore's of the run.
	c.lastEpoch = max(time.Now().Unix(), c.lastEpoch+1)
	for _, id := range c.ids {
		if err := os.Rename(c.DataDir(id), filepath.Join(lostDir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		epoch := c.lastEpoch
		if id == odd {
			epoch += nm.MismatchEpochSkew
		}
		p := c.Proc(id)
		p.Args = append(withoutFlags(p.Args, "--bootstrap", "--join", "--restore", "--restore-epoch"),
			"--bootstrap", c.bootstrapList(), "--restore", backup, "--restore-epoch", fmt.Sprint(epoch))
	}
	if odd != "" {
		if err := c.Proc(odd).Start(); err != nil {
			return err
		}
		if !sleepCtx(ctx, 2*time.Second) {
			return ctx.Err()
		}
	}
	for _, id := range c.ids {
		if id == odd {
			continue
		}
		if err := c.Proc(id).Start(); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if c.Leader(ctx) != "" {
			return nil
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("no leader within 30s of the restore; %s's log ends:\n%s", c.ids[0], c.procs[0].Tail(2048))
}

// Refound repairs node id of a restored cluster as docs/OPERATIONS.md
// says for a founding node given another file, bump or epoch: stop it,
// move its data dir to lostDir, and start it again from backup with the
// others' epoch.
func (c *Cluster) Refound(ctx context.Context, id, backup, lostDir string) error {
	p := c.Proc(id)
	p.Kill(syscall.SIGKILL, 10*time.Second)
	if err := os.Rename(c.DataDir(id), lostDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	p.Args = append(withoutFlags(p.Args, "--restore-epoch"), "--restore-epoch", fmt.Sprint(c.lastEpoch))
	return p.Start()
}

// NodeStates asks every running, unpaused node for its status, in
// parallel (1 s each); nodes that do not answer are left out.
func (c *Cluster) NodeStates(ctx context.Context) map[string]*api.StatusResponse {
	out := map[string]*api.StatusResponse{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range c.ids {
		p := c.Proc(id)
		if !p.Running() || p.Stopped() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := c.Status(ctx, id); err == nil {
				mu.Lock()
				out[id] = st
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// FreeAddrs implements nemesis.Members: n loopback addresses nothing
// listens on (FreeAddrs).
func (c *Cluster) FreeAddrs(n int) ([]string, error) { return FreeAddrs(n) }
