package nemesis

import (
	"context"
	"fmt"

	"github.com/leasefence/leasefence/jepsen/history"
)

// clockRateClientPause sets the leader's clock rate, runs a client pause
// (recorded as its own client-pause fault) and heals the clock.
func (n *Nemesis) clockRateClientPause(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	id, isLeader := n.target(ctx, history.NemClockRate+"-leader")
	rate := []float64{0.5, 2}[n.rng.IntN(2)]
	ok, err := setClockVerified(ctx, n.clocks, id, rate, 0)
	detail := fmt.Sprintf("monotonic rate %g× on %s (out of spec), then a client pause", rate, id)
	if !ok {
		detail += fmt.Sprintf("; the rate was not seen in Status: %v", err)
	}
	n.progress(fmt.Sprintf("nemesis: clock rate %g× on %s%s during a client pause", rate, id, leaderMark(isLeader)))
	n.record(history.Fault{Phase: "start", Kind: history.NemClockRateClientPause, Target: id, Leader: isLeader, Detail: detail})
	paused := n.clientPause(ctx, history.NemClientPause)
	n.record(history.Fault{Phase: "heal", Kind: history.NemClockRateClientPause, Target: id, Effective: ok && isLeader && paused,
		Detail: fmt.Sprintf("client pause effective: %v; %s", paused, n.healClocks(ctx, []string{id}))})
}
