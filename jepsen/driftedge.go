package jepsen

import (
	"fmt"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// The drift-edge settings.
const (
	// EdgeDrift is nemesis.EdgeDrift: the drift bound the nodes and the
	// clients assume, and the rate error of every clock the fault sets.
	EdgeDrift = nm.EdgeDrift
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
		on = on || history.IsDriftEdge(k)
		coarse = coarse || k == history.NemClockDriftEdgeCoarse
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
