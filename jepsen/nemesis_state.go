package jepsen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// SnapshotArgs make the nodes snapshot and compact often, so a node that
// was down for seconds must catch up through a snapshot (NemSnapshot) and
// restarts restore from one.
var SnapshotArgs = []string{"--snapshot-threshold", "32", "--snapshot-threshold-max", "32", "--trailing-logs", "32", "--snapshot-interval", "250ms"}

// installedMarker is what hashicorp/raft logs after installing a snapshot
// sent by the leader.
const installedMarker = "Installed remote snapshot"

// follower picks a random running node that is not the leader.
func (n *nemesis) follower(ctx context.Context) (string, bool) {
	leader := n.nodes.Leader(ctx)
	var ids []string
	for _, id := range n.nodes.Nodes() {
		if id != leader {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || leader == "" {
		return "", false
	}
	return ids[n.rng.IntN(len(ids))], true
}

func (n *nemesis) snapshot(ctx context.Context, hold time.Duration) {
	cl, ok := n.nodes.(nm.Cluster)
	id, found := n.follower(ctx)
	if !ok || !found {
		n.record(history.Fault{Phase: "start", Kind: history.NemSnapshot, Detail: "no follower to hold back (no leader)"})
		n.record(history.Fault{Phase: "heal", Kind: history.NemSnapshot, Detail: "nothing done"})
		return
	}
	before := strings.Count(cl.Process(id).Tail(1<<30), installedMarker)
	n.progress(fmt.Sprintf("nemesis: snapshot: %s down while the others compact their logs", id))
	err := cl.Kill9(id)
	n.record(history.Fault{Phase: "start", Kind: history.NemSnapshot, Target: id, Detail: errString(err, "SIGKILL; the others snapshot and compact meanwhile")})
	sleepCtx(context.WithoutCancel(ctx), hold+2*time.Second) // always heal
	rerr := cl.Restart(id)
	installed := false
	for deadline := time.Now().Add(20 * time.Second); rerr == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Count(cl.Process(id).Tail(1<<30), installedMarker) > before {
			installed = true
			break
		}
	}
	detail := "restarted; caught up through an installed snapshot"
	if !installed {
		detail = "restarted; no snapshot installed within 20s (it caught up from the log)"
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemSnapshot, Target: id, Effective: err == nil && installed, Detail: errString(rerr, detail)})
}

func (n *nemesis) member(ctx context.Context, hold time.Duration) {
	cl, ok := n.nodes.(nm.Cluster)
	id, found := n.follower(ctx)
	if !ok || !found {
		n.record(history.Fault{Phase: "start", Kind: history.NemMember, Detail: "no follower to remove (no leader)"})
		n.record(history.Fault{Phase: "heal", Kind: history.NemMember, Detail: "nothing done"})
		return
	}
	n.progress(fmt.Sprintf("nemesis: member: remove %s, wipe it, join it back", id))
	all := len(cl.Nodes())
	err := cl.RemoveMember(ctx, id)
	removed := err == nil && cl.WaitMembers(ctx, all-1, id, false)
	if err == nil {
		cl.Kill9(id)
		err = os.RemoveAll(cl.DataDir(id))
	}
	n.record(history.Fault{Phase: "start", Kind: history.NemMember, Target: id,
		Detail: errString(err, fmt.Sprintf("removed (seen %d members: %v), killed, data dir wiped", all-1, removed))})
	sleepCtx(context.WithoutCancel(ctx), hold) // always heal
	rerr := cl.Rejoin(ctx, id)
	joined := rerr == nil && cl.WaitMembers(context.WithoutCancel(ctx), all, id, true) && cl.WaitCaughtUp(context.WithoutCancel(ctx), id)
	n.record(history.Fault{Phase: "heal", Kind: history.NemMember, Target: id, Effective: removed && joined,
		Detail: errString(rerr, fmt.Sprintf("rejoined as a fresh node, seen among %d members and caught up: %v", all, joined))})
}

// DataDir returns node id's data dir.
func (c *Cluster) DataDir(id string) string { return filepath.Join(c.dir, id) }

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
