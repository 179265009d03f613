package jepsen

import (
	"slices"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// clock-drift-edge sets the nodes' drift bound, the least skew margin it
// allows for the max ttl, and the workers' client settings; a run without
// it is left alone.
func TestDriftEdgeSetsTheLeastSkewMarginTheDriftAllows(t *testing.T) {
	base := DefaultConfig()
	if cfg, e := DriftEdgeFor(base); e != nil || cfg.SkewMargin != base.SkewMargin || cfg.LinWorkers != base.LinWorkers {
		t.Fatalf("a run without clock-drift-edge changed: %+v", e)
	}
	if (*DriftEdge)(nil).NodeArgs() != nil || (*DriftEdge)(nil).WorkerArgs() != nil {
		t.Fatal("no settings, yet arguments")
	}
	base.Nemeses, base.KeepAliveWorkers = []string{history.NemClockDriftEdge}, 3
	cfg, e := DriftEdgeFor(base)
	if e == nil || cfg.DriftEdge != e {
		t.Fatal("no settings")
	}
	// leased's rule, as cluster.Config.Validate computes it: the margin
	// must not fall short of drift × max ttl.
	if drifted := time.Duration(e.Drift * float64(e.MaxTTL)); drifted > e.SkewMargin || e.SkewMargin != 100*time.Millisecond {
		t.Fatalf("skew margin %v, drift × max ttl %v", e.SkewMargin, drifted)
	}
	if e.MaxTTL != 2*time.Second || cfg.SkewMargin != e.SkewMargin || cfg.TTL <= 2*cfg.SkewMargin {
		t.Fatalf("max ttl %v, run's skew margin %v, ttl %v", e.MaxTTL, cfg.SkewMargin, cfg.TTL)
	}
	if cfg.LinWorkers != 0 || cfg.KeepAliveWorkers != 0 {
		t.Fatalf("lin workers %d, keep-alive workers %d: their ttls exceed the max ttl", cfg.LinWorkers, cfg.KeepAliveWorkers)
	}
	want := []string{"--drift", "0.05", "--max-ttl", "2s", "--skew-margin", "100ms"}
	if got := e.NodeArgs(); !slices.Equal(got, want) {
		t.Fatalf("node args %v, want %v", got, want)
	}
	want = []string{"--drift", "0.05", "--client-margin", "1ms", "--clock-rate", "0.95"}
	if got := e.WorkerArgs(); !slices.Equal(got, want) {
		t.Fatalf("worker args %v, want %v", got, want)
	}
	base.Nemeses = []string{history.NemClockDriftEdgeCoarse}
	_, e = DriftEdgeFor(base)
	want = []string{"--drift", "0.05", "--client-margin", "270ms", "--clock-rate", "0.95", "--clock-tick", "270ms"}
	if e == nil || !slices.Equal(e.WorkerArgs(), want) || e.SkewMargin != 100*time.Millisecond {
		t.Fatalf("coarse: %+v, want worker args %v", e, want)
	}
}

// The settings do what driftedge.go says, on paper: with the leader's
// clock at 1 + d and the client's at 1 − d, the correct client's window
// ends before the next grant may come, the one that ignores the drift
// ends well after it, and the one with no margin ends exactly at it when
// the request reaches the leader at once (it cannot overlap).
func TestDriftEdgeArithmetic(t *testing.T) {
	cfg, e := DriftEdgeFor(Config{Nemeses: []string{history.NemClockDriftEdge}, TTL: 2 * time.Second})
	d, ttl, s, m := e.Drift, float64(cfg.TTL), float64(e.SkewMargin), float64(e.ClientMargin)
	const sent, stamp = 0.0, 0.0 // the worst case: no way to the leader
	nextGrant := stamp + (ttl+s)/(1+d)
	end := func(drift, margin float64) float64 { // real time the client's clock reads its deadline
		return sent + (ttl*(1-drift)-margin)/e.ClientClockRate
	}
	if got := end(d, m); got >= nextGrant {
		t.Fatalf("correct client: window ends %v after the next grant may come", time.Duration(got-nextGrant))
	}
	if over := time.Duration(end(0, m) - nextGrant); over < 100*time.Millisecond {
		t.Fatalf("client-no-drift: window outlives the next grant by %v only", over)
	}
	if over := end(d, 0) - nextGrant; over > 1 { // float rounding: a nanosecond
		t.Fatalf("client-zero-margin: window outlives the next grant by %v", time.Duration(over))
	}

	// Coarse: the send time is read φ after the last tick; the client ends
	// the lease at the first reading at or past its deadline.
	cfg, e = DriftEdgeFor(Config{Nemeses: []string{history.NemClockDriftEdgeCoarse}, TTL: 2 * time.Second})
	g := e.ClientTick
	c := &rateClock{base: 0, rate: e.ClientClockRate, tick: g}
	var worstCorrect, worstZero time.Duration = -time.Hour, -time.Hour
	for phi := time.Duration(0); phi < g; phi += time.Millisecond {
		sentReal := time.Duration(float64(7*g+phi) / c.rate) // the clock reads 7 ticks + φ
		sentRead := 7 * g
		next := sentReal + time.Duration((ttl+float64(e.SkewMargin))/(1+d)) // stamped on arrival
		realEnd := func(margin time.Duration) time.Duration {
			return c.realAt(sentRead + time.Duration(ttl*(1-d)) - margin)
		}
		worstCorrect = max(worstCorrect, realEnd(e.ClientMargin)-next)
		worstZero = max(worstZero, realEnd(0)-next)
	}
	if worstCorrect > time.Microsecond {
		t.Fatalf("coarse, correct client: window outlives the next grant by up to %v", worstCorrect)
	}
	if worstZero < 250*time.Millisecond {
		t.Fatalf("coarse, client-zero-margin: window outlives the next grant by %v only", worstZero)
	}
}

// A rate clock runs at its rate, reads in whole ticks when it has one,
// and says when it first reads a value.
func TestRateClockRunsAtItsRateInTicks(t *testing.T) {
	c := newRateClock(0.95, 0)
	r0, c0 := history.Now(), c.Now()
	time.Sleep(100 * time.Millisecond)
	r1, c1 := history.Now(), c.Now()
	if ratio := float64(c1-c0) / float64(r1-r0); ratio < 0.94 || ratio > 0.96 {
		t.Fatalf("rate %g, want 0.95", ratio)
	}
	if got := c.realAt(c.base + 95*time.Millisecond); got != c.base+100*time.Millisecond {
		t.Fatalf("95ms on the clock comes %v of real time after its start, want 100ms", got-c.base)
	}
	tick := 250 * time.Millisecond
	k := newRateClock(0.95, tick)
	seen := map[time.Duration]bool{}
	for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		v := k.Now()
		if v%tick != 0 {
			t.Fatalf("reading %v is not a whole tick", v)
		}
		seen[v] = true
	}
	if len(seen) < 2 || len(seen) > 4 {
		t.Fatalf("%d readings in 600ms of ticks of %v", len(seen), tick)
	}
	// The first reading at or past 10 ticks + 1ns is 11 ticks.
	v := 10*tick + 1
	if got, want := k.realAt(v), k.base+time.Duration(float64(11*tick-k.base)/0.95); got != want {
		t.Fatalf("realAt %v, want %v", got, want)
	}
}

// clock-drift-edge is named, never part of "all" (it sets up the whole
// run), and turns the fault clock on.
func TestClockDriftEdgeIsNamedNotAll(t *testing.T) {
	for _, k := range []string{history.NemClockDriftEdge, history.NemClockDriftEdgeCoarse} {
		if slices.Contains(nm.InSpecNemeses(), k) {
			t.Fatalf("%s in all", k)
		}
		ks, err := nm.ParseNemeses(k)
		if err != nil || !UsesClock(ks) {
			t.Fatalf("%v %v", ks, err)
		}
	}
}

// In a clock-drift-edge run the checkers of the (absent) linearizability
// workload do not decide the run when they found nothing to check; an
// anomaly they find still does.
func TestDriftEdgeRunLeavesOnlyUndecidedLinCheckersNotRequired(t *testing.T) {
	mk := func() []checker.Result {
		return []checker.Result{{Checker: checker.NameLinearizable, Verdict: history.Unknown}, {Checker: checker.NameDurable, Verdict: checker.Invalid},
			{Checker: checker.NameSafeWindows, Verdict: history.Unknown}}
	}
	rs := mk()
	checker.MarkRequired([]string{history.NemClockDriftEdge}, rs)
	if rs[0].Required() || !rs[1].Required() || !rs[2].Required() {
		t.Fatalf("%+v", rs)
	}
	rs = mk()
	checker.MarkRequired([]string{history.NemClockBump}, rs)
	for _, r := range rs {
		if !r.Required() {
			t.Fatalf("%s not required without clock-drift-edge", r.Checker)
		}
	}
}
