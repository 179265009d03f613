package nemesis

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasefence/leasefence/jepsen/history"
)

// EdgeDrift is the drift bound the nodes and the clients assume under
// NemClockDriftEdge, and the rate error of every clock the fault sets
// (nodes 1 + EdgeDrift, clients 1 − EdgeDrift: the top-level DriftEdge
// sets up the run). The nodes and the client accept up to 0.1.
const EdgeDrift = 0.05

// clockDriftEdge runs every node's monotonic clock at 1 + EdgeDrift, waits
// a ttl (every lease then live was granted or renewed on the fast clock),
// stops a worker before its write until a newer holder has written (a
// client-pause), and puts the clocks back at rate 1. Effective when every
// node reported the rate and the pause was effective.
func (n *Nemesis) clockDriftEdge(ctx context.Context, kind string) {
	ctx = context.WithoutCancel(ctx) // always heal
	ids := n.nodes.Nodes()
	rate := 1 + EdgeDrift
	var bad []string
	for _, id := range ids {
		if ok, err := setClockVerified(ctx, n.clocks, id, rate, 0); !ok {
			bad = append(bad, fmt.Sprintf("%s: %v", id, err))
		}
	}
	leader := n.nodes.Leader(ctx)
	detail := fmt.Sprintf("monotonic rate %g× on every node (the drift bound %g, in spec; read back), then a client pause", rate, EdgeDrift)
	if len(bad) > 0 {
		detail = fmt.Sprintf("monotonic rate %g× on every node, not seen in Status on %s; then a client pause", rate, strings.Join(bad, "; "))
	}
	target := strings.Join(ids, ",")
	n.progress(fmt.Sprintf("nemesis: clock rate %g× on every node (leader %s), then a client pause", rate, leader))
	n.record(history.Fault{Phase: "start", Kind: kind, Target: target, Leader: leader != "", Detail: detail})
	sleepCtx(ctx, n.ttl)
	paused := n.clientPause(ctx, history.NemClientPause)
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: target, Effective: len(bad) == 0 && paused,
		Detail: fmt.Sprintf("client pause effective: %v; %s", paused, n.healClocks(ctx, ids))})
}
