package nemesis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// SnapshotArgs are the nodes' snapshot flags for a run of nemeses. The
// nodes snapshot often, so that restarts restore from a snapshot, and keep
// only 32 entries past one, so that a node down for seconds must catch up
// through a snapshot (NemSnapshot). With lose-tail and without snapshot
// they keep their whole log instead: the followers lose-tail cuts off then
// catch up from the log, not by installing the leader's newest snapshot,
// which would cut the watcher's stream (a gap, where the watch-based
// checkers cannot decide).
func SnapshotArgs(nemeses []string) []string {
	trailing := "32"
	if slices.Contains(nemeses, history.NemLoseTail) && !slices.Contains(nemeses, history.NemSnapshot) {
		trailing = "1000000"
	}
	return []string{"--snapshot-threshold", "32", "--snapshot-threshold-max", "32", "--trailing-logs", trailing, "--snapshot-interval", "250ms"}
}

// installedMarker is what hashicorp/raft logs after installing a snapshot
// sent by the leader.
const installedMarker = "Installed remote snapshot"

// follower picks a random running node that is not the leader.
func (n *Nemesis) follower(ctx context.Context) (string, bool) {
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

func (n *Nemesis) snapshot(ctx context.Context, hold time.Duration) {
	cl, id, ok := n.clusterFollower(ctx, history.NemSnapshot, "no follower to hold back (no leader)")
	if !ok {
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

func (n *Nemesis) member(ctx context.Context, hold time.Duration) {
	cl, id, ok := n.clusterFollower(ctx, history.NemMember, "no follower to remove (no leader)")
	if !ok {
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
