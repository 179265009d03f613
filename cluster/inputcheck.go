package cluster

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// checkWatchAfter refuses a Watch resume position beyond this node's log:
// every position a client holds came from an event some node of the
// cluster applied. A follower may be behind the node that sent the event,
// so the check first waits, up to twice the election timeout (or the
// call's deadline), for this node to apply the position. Then the leader,
// whose log holds every position ever sent, answers OutOfRange; a follower
// answers Unavailable (it may only be behind: retry elsewhere or later).
// A node that has applied nothing since it started leaves the answer to
// the hub (Unavailable).
func (n *Node) checkWatchAfter(ctx context.Context, after *api.Position) error {
	if after == nil || after.Index <= n.raft.AppliedIndex() || n.hub.waitingForFirstApply() {
		return nil
	}
	wait := time.NewTimer(2 * n.cfg.ElectionTimeout)
	defer wait.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-n.stopCh:
			return status.Error(codes.Unavailable, "node stopping")
		case <-wait.C:
			if !n.IsLeader() {
				return status.Errorf(codes.Unavailable, "position %d.%d is beyond this follower's log (applied %d): it may be behind; retry on another node",
					after.Index, after.Seq, n.raft.AppliedIndex())
			}
			return status.Errorf(codes.OutOfRange, "position %d.%d is beyond the leader's log (applied %d): resume only from positions of events received",
				after.Index, after.Seq, n.raft.AppliedIndex())
		case <-tick.C:
			if after.Index <= n.raft.AppliedIndex() {
				return nil
			}
		}
	}
}
