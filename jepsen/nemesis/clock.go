package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// setClockVerified sets node id's clock and polls its Status (every 20 ms,
// up to 2 s) until it reports those settings.
func setClockVerified(ctx context.Context, cc ClockControl, id string, rate float64, off time.Duration) (bool, error) {
	if err := cc.SetClock(id, rate, off); err != nil {
		return false, err
	}
	deadline := time.Now().Add(2 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		r, o, err := cc.ClockStatus(ctx, id)
		if err == nil && r == rate && o == off {
			return true, nil
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	if last == nil {
		last = errors.New("status did not report the new settings within 2s")
	}
	return false, last
}

// clockTargets picks one node, or (half the time) a random subset of two
// or more, in the nodes' order.
func (n *Nemesis) clockTargets() []string {
	ids := n.nodes.Nodes()
	k := 1
	if n.rng.IntN(2) == 1 {
		k = 2 + n.rng.IntN(len(ids)-1)
	}
	pick := n.rng.Perm(len(ids))[:k]
	var out []string
	for i, id := range ids {
		for _, p := range pick {
			if p == i {
				out = append(out, id)
			}
		}
	}
	return out
}

// wallOffset is ± 1 s to 1 h, log-uniform (as many small steps as large).
func (n *Nemesis) wallOffset() time.Duration {
	d := time.Duration(float64(time.Second) * math.Pow(3600, n.rng.Float64()))
	if n.rng.IntN(2) == 0 {
		d = -d
	}
	return d.Round(time.Millisecond)
}

// healClocks puts every target back at rate 1 and offset 0, verified.
func (n *Nemesis) healClocks(ctx context.Context, ids []string) string {
	var bad []string
	for _, id := range ids {
		if ok, err := setClockVerified(ctx, n.clocks, id, 1, 0); !ok {
			bad = append(bad, fmt.Sprintf("%s: %v", id, err))
		}
	}
	if len(bad) > 0 {
		return "error: not healed: " + strings.Join(bad, "; ")
	}
	return "rate 1, wall offset 0 on " + strings.Join(ids, ",") + " (read back)"
}

// clockBump steps the wall clock of one or several nodes by ± 1 s to 1 h
// (each its own offset) for the hold.
func (n *Nemesis) clockBump(ctx context.Context, hold time.Duration) {
	ctx = context.WithoutCancel(ctx) // always heal
	ids := n.clockTargets()
	leader := n.nodes.Leader(ctx)
	var parts []string
	effective := true
	for _, id := range ids {
		off := n.wallOffset()
		ok, err := setClockVerified(ctx, n.clocks, id, 1, off)
		effective = effective && ok
		seen := " (read back)"
		if !ok {
			seen = fmt.Sprintf(" (not seen in Status: %v)", err)
		}
		parts = append(parts, fmt.Sprintf("%s%s %s%s", id, leaderMark(id == leader), signed(off), seen))
	}
	target := strings.Join(ids, ",")
	n.progress("nemesis: wall clock bump " + strings.Join(parts, ", "))
	n.record(history.Fault{Phase: "start", Kind: history.NemClockBump, Target: target, Leader: contains(ids, leader), Detail: "wall offset " + strings.Join(parts, ", ")})
	sleepCtx(ctx, hold)
	n.record(history.Fault{Phase: "heal", Kind: history.NemClockBump, Target: target, Effective: effective, Detail: n.healClocks(ctx, ids)})
}

// clockStrobe flips the wall clock of one or several nodes between +X and
// −X (X of 1 s to 1 h per node) every 50–200 ms for the hold. Effective
// when every target's Status was seen at both signs.
func (n *Nemesis) clockStrobe(ctx context.Context, hold time.Duration) {
	ctx = context.WithoutCancel(ctx)
	ids := n.clockTargets()
	leader := n.nodes.Leader(ctx)
	amp := map[string]time.Duration{}
	var parts []string
	for _, id := range ids {
		a := n.wallOffset()
		if a < 0 {
			a = -a
		}
		amp[id] = a
		parts = append(parts, fmt.Sprintf("%s%s ±%v", id, leaderMark(id == leader), a))
	}
	target := strings.Join(ids, ",")
	n.progress("nemesis: wall clock strobe " + strings.Join(parts, ", "))
	n.record(history.Fault{Phase: "start", Kind: history.NemClockStrobe, Target: target, Leader: contains(ids, leader), Detail: "wall offset flipping " + strings.Join(parts, ", ")})
	seen := map[string]map[bool]bool{} // id -> sign seen in Status
	flips, errs := 0, 0
	end := time.Now().Add(hold)
	for sign := 1; time.Now().Before(end) && flips < 1000; sign = -sign {
		for _, id := range ids {
			if n.clocks.SetClock(id, 1, time.Duration(sign)*amp[id]) != nil {
				errs++
			}
		}
		flips++
		time.Sleep(50*time.Millisecond + time.Duration(n.rng.Int64N(int64(150*time.Millisecond))))
		for _, id := range ids {
			if _, off, err := n.clocks.ClockStatus(ctx, id); err == nil && off != 0 {
				if seen[id] == nil {
					seen[id] = map[bool]bool{}
				}
				seen[id][off > 0] = true
			}
		}
	}
	effective := errs == 0
	for _, id := range ids {
		effective = effective && seen[id][true] && seen[id][false]
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemClockStrobe, Target: target, Effective: effective,
		Detail: fmt.Sprintf("%d flips, %d write errors, both signs seen in Status: %v; %s", flips, errs, effective, n.healClocks(ctx, ids))})
}

// clockRate runs the leader's monotonic clock at 0.5× or 2× for the hold:
// far beyond the drift bound (DESIGN.md, default 1e-4), so out of spec.
// Effective when the node was the leader and reported the rate.
func (n *Nemesis) clockRate(ctx context.Context, hold time.Duration) {
	ctx = context.WithoutCancel(ctx)
	id, isLeader := n.target(ctx, history.NemClockRate+"-leader")
	rate := []float64{0.5, 2}[n.rng.IntN(2)]
	ok, err := setClockVerified(ctx, n.clocks, id, rate, 0)
	detail := fmt.Sprintf("monotonic rate %g× (out of spec: beyond the drift bound)", rate)
	switch {
	case !ok:
		detail += fmt.Sprintf(", not seen in Status: %v", err)
	case !isLeader:
		detail += ", read back, but no leader was known: the node hit is not the leader"
	default:
		detail += ", read back"
	}
	n.progress(fmt.Sprintf("nemesis: clock rate %g× on %s%s", rate, id, leaderMark(isLeader)))
	n.record(history.Fault{Phase: "start", Kind: history.NemClockRate, Target: id, Leader: isLeader, Detail: detail})
	sleepCtx(ctx, hold)
	n.record(history.Fault{Phase: "heal", Kind: history.NemClockRate, Target: id, Effective: ok && isLeader, Detail: n.healClocks(ctx, []string{id})})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x != "" && y == x {
			return true
		}
	}
	return false
}

// signed formats d with its sign: +1m2s, -3s.
func signed(d time.Duration) string {
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}
