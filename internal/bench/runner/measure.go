// Package runner is the measurement loop and the report shared by
// leasebench and the etcd comparison driver (bench/etcd): workers run an
// operation in a bounded loop, latencies go into HDR histograms, and the
// results print as a table or JSON lines.
package runner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Sample is what one operation reports to Measure besides its latency.
type Sample struct {
	// Kind indexes Phase.Kinds (0 when the phase has one kind).
	Kind int
	// Refused marks a domain refusal (a held resource): a normal answer,
	// counted and timed apart from the successful operations.
	Refused bool
}

// Op is one operation of a workload, run by worker w (0 <= w < Concurrency)
// as its i-th operation. It must honour ctx: Measure ends ctx when the
// phase is over (after a grace period for operations in flight).
type Op func(ctx context.Context, w int, i int64) (Sample, error)

// Phase bounds a measurement in time and in count.
type Phase struct {
	// Concurrency is the number of workers, each running Op in a loop.
	Concurrency int
	// Warmup runs Op without recording it before the measured window.
	Warmup time.Duration
	// Duration is the measured window. Workers start no operation after it.
	Duration time.Duration
	// MaxOps bounds the operations started (warm-up included); 0 means no
	// bound beyond Duration.
	MaxOps int64
	// Grace is how long operations started inside the window may take to
	// finish after it before their context ends. Default 10s.
	Grace time.Duration
	// Kinds names the kinds of operation an Op reports; default {"op"}.
	Kinds []string
	// Probe, when set, reads counters of the system under test at the
	// window's start and end; Result.Extra gets "<name>_per_s" for each.
	Probe func(context.Context) map[string]float64
}

// histogram bounds: 1 µs to 120 s at 3 significant digits.
const (
	histMin = 1
	histMax = 120_000_000
	histSig = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histSig) }

// worker state: nothing shared, merged after the phase.
type workerStats struct {
	ok, refused []*hdrhistogram.Histogram // per kind
	errors      int64
	firstErr    error
	lastDone    time.Time
}

// Measure runs op from p.Concurrency workers: a warm-up, then the measured
// window. Every operation that starts inside the window is timed, including
// those that end after it (so slow tails are not cut off); throughput is the
// successful ones divided by the time from the window's start to the end of
// the last of them. Errors are counted, not fatal; an error after ctx ended
// is not counted. Every loop stops at the window's end, at MaxOps, or when
// ctx ends, whichever comes first.
func Measure(ctx context.Context, p Phase, op Op) (*Result, error) {
	if p.Concurrency < 1 {
		return nil, errors.New("runner: concurrency must be at least 1")
	}
	if p.Duration <= 0 {
		return nil, errors.New("runner: duration must be positive")
	}
	if p.Warmup < 0 {
		return nil, errors.New("runner: negative warm-up")
	}
	if p.Grace == 0 {
		p.Grace = 10 * time.Second
	}
	kinds := p.Kinds
	if len(kinds) == 0 {
		kinds = []string{"op"}
	}
	start := time.Now()
	windowStart := start.Add(p.Warmup)
	windowEnd := windowStart.Add(p.Duration)
	opCtx, cancel := context.WithDeadline(ctx, windowEnd.Add(p.Grace))
	defer cancel()

	probed := make(chan map[string]float64, 1)
	if p.Probe != nil {
		go func() {
			var before, after map[string]float64
			var t0 time.Time
			for i, at := range []time.Time{windowStart, windowEnd} {
				t := time.NewTimer(time.Until(at))
				select {
				case <-t.C:
				case <-opCtx.Done():
					t.Stop()
					probed <- nil
					return
				}
				if i == 0 {
					before, t0 = p.Probe(opCtx), time.Now()
				} else {
					after = p.Probe(opCtx)
				}
			}
			rates := map[string]float64{}
			el := time.Since(t0).Seconds()
			for k, v := range after {
				if b, ok := before[k]; ok {
					rates[k+"_per_s"] = (v - b) / el
				}
			}
			probed <- rates
		}()
	} else {
		probed <- nil
	}
	var started atomic.Int64
	stats := make([]*workerStats, p.Concurrency)
	var wg sync.WaitGroup
	for w := range p.Concurrency {
		ws := &workerStats{ok: make([]*hdrhistogram.Histogram, len(kinds)), refused: make([]*hdrhistogram.Histogram, len(kinds))}
		for k := range kinds {
			ws.ok[k], ws.refused[k] = newHist(), newHist()
		}
		stats[w] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ; i++ {
				if opCtx.Err() != nil {
					return
				}
				if p.MaxOps > 0 && started.Add(1) > p.MaxOps {
					return
				}
				t0 := time.Now()
				if !t0.Before(windowEnd) {
					return
				}
				s, err := op(opCtx, w, i)
				t1 := time.Now()
				if t0.Before(windowStart) {
					continue // warm-up
				}
				if err != nil {
					if opCtx.Err() == nil {
						ws.errors++
						if ws.firstErr == nil {
							ws.firstErr = err
						}
					}
					continue
				}
				if s.Kind < 0 || s.Kind >= len(kinds) {
					s.Kind = 0
				}
				us := max(t1.Sub(t0).Microseconds(), histMin)
				h := ws.ok[s.Kind]
				if s.Refused {
					h = ws.refused[s.Kind]
				}
				_ = h.RecordValue(min(us, histMax))
				ws.lastDone = t1
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	r := &Result{Clients: p.Concurrency, Warmup: Secs(p.Warmup), Duration: Secs(p.Duration)}
	if rates := <-probed; len(rates) > 0 {
		r.Extra = rates
	}
	end := windowEnd
	ok, refused := newHist(), newHist()
	for k, name := range kinds {
		kok, kref := newHist(), newHist()
		for _, ws := range stats {
			kok.Merge(ws.ok[k])
			kref.Merge(ws.refused[k])
		}
		ok.Merge(kok)
		refused.Merge(kref)
		if len(kinds) > 1 {
			r.Kinds = append(r.Kinds, KindResult{Name: name, Ops: kok.TotalCount(), Refused: kref.TotalCount(), Latency: summarize(kok)})
		}
	}
	for _, ws := range stats {
		if ws.lastDone.After(end) {
			end = ws.lastDone
		}
		r.Errors += ws.errors
		if ws.firstErr != nil && r.FirstError == "" {
			r.FirstError = ws.firstErr.Error()
		}
	}
	el := end.Sub(windowStart).Seconds()
	r.Elapsed = el
	r.Ops = ok.TotalCount()
	r.OpsPerSec = float64(r.Ops) / el
	r.Refused = refused.TotalCount()
	r.RefusedPerSec = float64(r.Refused) / el
	r.Latency = summarize(ok)
	if r.Refused > 0 {
		l := summarize(refused)
		r.RefusedLatency = &l
	}
	for i := range r.Kinds {
		r.Kinds[i].OpsPerSec = float64(r.Kinds[i].Ops) / el
	}
	return r, nil
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1000,
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}
