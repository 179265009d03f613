package jepsen

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/jepsen/history"
)

// NemClockDriftEdge puts the clocks at the edge of what the settings allow
// (issue 15, the client's drift and margin bugs). It is in spec: every
// clock runs within the drift bound of real time. It is also a run
// configuration (DriftEdgeFor): the nodes assume a large drift bound with
// the smallest skew margin that bound allows, and the fenced workers'
// client clocks run slow by the bound for the whole run; each fault runs
// every node's monotonic clock fast by the bound, so whichever node leads
// ages leases as fast as the bound permits, and then stops a worker before
// its write (a client-pause, recorded as its own fault) so that its
// lease runs out while it holds it.
//
// The arithmetic (DESIGN.md, "Time"), with d the drift, T the ttl (= the
// max ttl), S = d × T the skew margin, m the client margin: a grant or
// renewal stamped at real time t_g leaves the resource free for the next
// grant from t_g + (T + S)/(1 + d) = t_g + T on. The holder's client
// measures sent_at + T(1 − d) − m on a clock at 1 − d, which in real time
// ends at sent_at + T − m/(1 − d): before t_g + T, by m/(1 − d) at least.
// With the drift ignored (client-no-drift) it ends at sent_at + (T −
// m)/(1 − d), up to (T·d − m)/(1 − d) after the next grant may come: 104
// ms at the settings below.
//
// With no margin (client-zero-margin) the window ends at sent_at + T,
// which is t_g − sent_at (the request's way to the leader) before the
// resource may be granted again, and the next holder's window starts when
// its own acquire has been committed and answered, later still: on clocks
// read to the nanosecond the two windows at most touch, they cannot
// overlap. The margin is there for discrete readings (DESIGN.md: "with no
// margin one unit of reading error is enough for two holders' windows to
// touch"), which NemClockDriftEdgeCoarse adds.
const NemClockDriftEdge = "clock-drift-edge"

// NemClockDriftEdgeCoarse is NemClockDriftEdge with client clocks that
// read in ticks (each reading the last tick passed), and a client margin
// of one tick, the least that covers a reading's error. A deadline
// sent_at + T(1 − d) − m is reached at the first tick at or after it; with
// a margin of one tick that tick is never later than sent_at + T(1 − d) on
// an exact clock, so the correct client still ends by sent_at + T. With no
// margin it may be up to a tick later. The tick is chosen for the worst
// case, a full-ttl deadline just past a tick (coarseTick): at T = 2 s, d =
// 0.05, ticks of 270 ms, T(1 − d) = 1.9 s is 7 ticks and 10 ms, so a send
// read φ after its tick ends (260 ms − φ)/0.95 after sent_at + T, an
// overlap whenever that is more than the next holder's delay (its way to
// the leader and back once the resource is free).
const NemClockDriftEdgeCoarse = "clock-drift-edge-coarse"

// The drift-edge settings.
const (
	// EdgeDrift is the drift bound the nodes and the clients assume, and
	// the rate error of every clock the fault sets (nodes 1 + EdgeDrift,
	// clients 1 − EdgeDrift). The nodes and the client accept up to 0.1.
	EdgeDrift = 0.05
	// EdgeClientMargin is the workers' client margin: small (the client
	// refuses zero), so that drift alone decides whether windows overlap.
	// Clock readings here are nanoseconds; a millisecond covers a reading
	// error many times over.
	EdgeClientMargin = time.Millisecond
	// edgeTicksPerTTL and edgeTickSlack set the client clocks' tick under
	// NemClockDriftEdgeCoarse (coarseTick).
	edgeTicksPerTTL = 7
	edgeTickSlack   = 10 * time.Millisecond
)

// coarseTick is the tick that puts the deadline of a full-ttl grant (ttl ×
// (1 − drift) after its send) edgeTickSlack past the edgeTicksPerTTL-th
// tick after the send's reading: the client then sees it a tick less the
// slack late, the most a reading in ticks can be late. 270 ms at 2 s.
func coarseTick(ttl time.Duration, drift float64) time.Duration {
	return (time.Duration(float64(ttl)*(1-drift)) - edgeTickSlack) / edgeTicksPerTTL
}

// DriftEdge is the run configuration of NemClockDriftEdge (config.json's
// drift_edge).
type DriftEdge struct {
	// Drift is the nodes' and the workers' drift bound.
	Drift float64 `json:"drift"`
	// MaxTTL is the nodes' max ttl: the workers' ttl, or the harness
	// sentinel's 2 s if that is longer.
	MaxTTL time.Duration `json:"max_ttl"`
	// SkewMargin is Drift × MaxTTL, the smallest the nodes accept.
	SkewMargin time.Duration `json:"skew_margin"`
	// ClientMargin is the fenced workers' client margin.
	ClientMargin time.Duration `json:"client_margin"`
	// ClientClockRate is the rate of the fenced workers' client clocks.
	ClientClockRate float64 `json:"client_clock_rate"`
	// ClientTick, when set, is the granularity of their readings
	// (NemClockDriftEdgeCoarse).
	ClientTick time.Duration `json:"client_tick,omitempty"`
}

// DriftEdgeFor returns cfg set up for NemClockDriftEdge or
// NemClockDriftEdgeCoarse (the coarse one when both are named) when it is
// one of cfg's nemeses, and the settings it chose (nil otherwise: cfg
// unchanged).
// The skew margin becomes Drift × MaxTTL (written as the nodes compute
// it, so it is exactly the least they accept); the linearizability and
// keep-alive workloads are left out, since their ttls (longer than the
// run; 10 s and 30 s) would need a max ttl, and with it a skew margin, far
// above the fenced workers' ttl.
func DriftEdgeFor(cfg Config) (Config, *DriftEdge) {
	on, coarse := false, false
	for _, k := range cfg.Nemeses {
		on = on || isDriftEdge(k)
		coarse = coarse || k == NemClockDriftEdgeCoarse
	}
	if !on {
		return cfg, nil
	}
	maxTTL := max(cfg.TTL, sentinelTTL)
	e := &DriftEdge{Drift: EdgeDrift, MaxTTL: maxTTL, SkewMargin: time.Duration(EdgeDrift * float64(maxTTL)),
		ClientMargin: EdgeClientMargin, ClientClockRate: 1 - EdgeDrift}
	if coarse {
		e.ClientTick = coarseTick(cfg.TTL, e.Drift)
		e.ClientMargin = e.ClientTick
	}
	cfg.SkewMargin = e.SkewMargin
	cfg.LinWorkers, cfg.KeepAliveWorkers = 0, 0
	cfg.DriftEdge = e
	return cfg, e
}

func isDriftEdge(k string) bool { return k == NemClockDriftEdge || k == NemClockDriftEdgeCoarse }

// sentinelTTL is the ttl of the harness's sentinel lease (run.go).
const sentinelTTL = 2 * time.Second

// NodeArgs are the leased arguments of the settings; they come after the
// run's own (the last of a repeated flag wins). Nil-safe: none.
func (e *DriftEdge) NodeArgs() []string {
	if e == nil {
		return nil
	}
	return []string{"--drift", fmt.Sprint(e.Drift), "--max-ttl", e.MaxTTL.String(), "--skew-margin", e.SkewMargin.String()}
}

// WorkerArgs are the fenced workers' arguments of the settings. Nil-safe:
// none.
func (e *DriftEdge) WorkerArgs() []string {
	if e == nil {
		return nil
	}
	args := []string{"--drift", fmt.Sprint(e.Drift), "--client-margin", e.ClientMargin.String(), "--clock-rate", fmt.Sprint(e.ClientClockRate)}
	if e.ClientTick > 0 {
		args = append(args, "--clock-tick", e.ClientTick.String())
	}
	return args
}

// clockDriftEdge runs every node's monotonic clock at 1 + EdgeDrift, waits
// a ttl (every lease then live was granted or renewed on the fast clock),
// stops a worker before its write until a newer holder has written (a
// client-pause), and puts the clocks back at rate 1. Effective when every
// node reported the rate and the pause was effective.
func (n *nemesis) clockDriftEdge(ctx context.Context, kind string) {
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
	paused := n.clientPause(ctx, NemClientPause)
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: target, Effective: len(bad) == 0 && paused,
		Detail: fmt.Sprintf("client pause effective: %v; %s", paused, n.healClocks(ctx, ids))})
}

// rateClock is a worker's client clock (client.Config.Clock) running at a
// constant rate of CLOCK_BOOTTIME from its creation, and, with a tick,
// reading in whole ticks (each reading the last tick passed). Like
// CLOCK_BOOTTIME it counts the time the worker is stopped.
type rateClock struct {
	base time.Duration // CLOCK_BOOTTIME at creation
	rate float64
	tick time.Duration // 0: readings to the nanosecond
}

func newRateClock(rate float64, tick time.Duration) *rateClock {
	if rate == 0 {
		rate = 1
	}
	return &rateClock{base: client.BootClock{}.Now(), rate: rate, tick: tick}
}

// Now implements client.Clock.
func (c *rateClock) Now() time.Duration {
	v := c.base + time.Duration(float64(client.BootClock{}.Now()-c.base)*c.rate)
	if c.tick > 0 {
		v -= v % c.tick
	}
	return v
}

// realAt is the real time (CLOCK_BOOTTIME) at which the clock first reads
// v or more.
func (c *rateClock) realAt(v time.Duration) time.Duration {
	if c.tick > 0 && v%c.tick != 0 {
		v += c.tick - v%c.tick
	}
	return c.base + time.Duration(float64(v-c.base)/c.rate)
}

// deadlineNs is the real time (CLOCK_BOOTTIME ns) at which l's safe
// deadline passes on the clock: the client ends the lease at the first
// reading at or past it. SafeUntil is the client's own reading plus the
// time left on its clock, as time.Now() plus that time; a reading taken
// just before it (and seen unchanged just after, so that no tick passed in
// between) gives the deadline on the clock. Every error (the nanoseconds
// between the reads; a tick passing three times running) makes it
// earlier, never later.
func (c *rateClock) deadlineNs(l *client.Lease) int64 {
	var v time.Duration
	for range 3 {
		before := c.Now()
		v = before + time.Until(l.SafeUntil())
		if c.tick == 0 || c.Now() == before {
			break
		}
	}
	return int64(c.realAt(v))
}

// ReasonDriftEdgeNoLin is why, in a clock-drift-edge run, a checker of the
// linearizability workload that found nothing to check does not decide it.
const ReasonDriftEdgeNoLin = "clock-drift-edge runs no linearizability workload (its ttls would exceed the max ttl)"

// driftEdgeRequired marks, in a run with NemClockDriftEdge, the verdicts
// of lease-linearizable and acknowledged-ops-durable not required when
// they are unknown: they check the linearizability workload's operations
// (durable also the API renewals and releases that a stalling worker makes
// inside its lease, which may be none), and DriftEdgeFor leaves that
// workload out. An anomaly they find still fails the run.
func driftEdgeRequired(nemeses []string, rs []Result) {
	on := false
	for _, k := range nemeses {
		on = on || isDriftEdge(k)
	}
	if !on {
		return
	}
	for i := range rs {
		if (rs[i].Checker == NameLinearizable || rs[i].Checker == NameDurable) && rs[i].Verdict == history.Unknown {
			rs[i].NotRequired = ReasonDriftEdgeNoLin
		}
	}
}
