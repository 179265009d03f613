package runner

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMeasureStopsAtMaxOpsBeforeTheWindowEnds(t *testing.T) {
	var calls atomic.Int64
	start := time.Now()
	r, err := Measure(context.Background(), Phase{Concurrency: 4, Duration: time.Minute, MaxOps: 100},
		func(ctx context.Context, w int, i int64) (Sample, error) {
			calls.Add(1)
			return Sample{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 100 || r.Ops != 100 {
		t.Fatalf("calls %d, ops %d, want 100", calls.Load(), r.Ops)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %v: MaxOps did not end the run", time.Since(start))
	}
}

func TestMeasureCountsOnlyTheWindowAndSeparatesRefusalsAndErrors(t *testing.T) {
	r, err := Measure(context.Background(), Phase{Concurrency: 3, Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond},
		func(ctx context.Context, w int, i int64) (Sample, error) {
			time.Sleep(time.Millisecond)
			switch w {
			case 1:
				return Sample{Refused: true}, nil
			case 2:
				return Sample{}, errors.New("boom")
			}
			return Sample{}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops == 0 || r.Refused == 0 || r.Errors == 0 || r.FirstError != "boom" {
		t.Fatalf("ops %d refused %d errors %d first %q", r.Ops, r.Refused, r.Errors, r.FirstError)
	}
	// 200ms of 1ms ops per worker: at most ~200 each, warm-up excluded.
	if r.Ops > 260 || r.Refused > 260 {
		t.Fatalf("ops %d, refused %d: warm-up or time after the window counted", r.Ops, r.Refused)
	}
	if r.Latency.P50 < 1 || r.Latency.Max < r.Latency.P99 || r.RefusedLatency == nil {
		t.Fatalf("latency %+v refused %+v", r.Latency, r.RefusedLatency)
	}
	if r.Elapsed < 0.2 {
		t.Fatalf("elapsed %v shorter than the window", r.Elapsed)
	}
}

func TestMeasureEndsSlowOperationsAfterTheGrace(t *testing.T) {
	start := time.Now()
	_, err := Measure(context.Background(), Phase{Concurrency: 2, Duration: 50 * time.Millisecond, Grace: 50 * time.Millisecond},
		func(ctx context.Context, w int, i int64) (Sample, error) {
			<-ctx.Done() // an operation that never answers
			return Sample{}, ctx.Err()
		})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestMeasureRefusesBadPhases(t *testing.T) {
	op := func(context.Context, int, int64) (Sample, error) { return Sample{}, nil }
	for _, p := range []Phase{{Concurrency: 0, Duration: time.Second}, {Concurrency: 1}, {Concurrency: 1, Duration: time.Second, Warmup: -1}} {
		if _, err := Measure(context.Background(), p, op); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestReportJSONRoundTripsAndCompareGivesRatios(t *testing.T) {
	rs := []*Result{
		{System: "leasefence", Workload: "acquire-release", Clients: 64, OpsPerSec: 4000, Latency: Latency{Count: 1, P50: 5, P99: 10, P999: 20}},
		{System: "etcd", Workload: "acquire-release", Clients: 64, OpsPerSec: 2000, Latency: Latency{Count: 1, P50: 10, P99: 20, P999: 20}},
	}
	var buf bytes.Buffer
	if err := Report(&buf, rs, true); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&buf)
	if err != nil || len(back) != 2 || back[1].OpsPerSec != 2000 {
		t.Fatalf("read back %v, %v", back, err)
	}
	buf.Reset()
	if err := Compare(&buf, back, "leasefence", "etcd"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2.00x", "0.50x", "1.00x"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("compare lacks %s:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := Report(&buf, rs, false); err != nil || !strings.Contains(buf.String(), "p99.9 ms") {
		t.Fatalf("table: %v\n%s", err, buf.String())
	}
}

func TestCompareTakesTheMedianPairOfRoundsAndItsRange(t *testing.T) {
	var rs []*Result
	for i, ops := range [][2]float64{{3000, 1000}, {9000, 1000}, {4000, 1000}} {
		lat := Latency{Count: 1, P50: 1, P99: 1, P999: 1}
		// The systems alternate which goes first; Compare pairs by order
		// within each system, not by position in the file.
		a := &Result{System: "leasefence", Workload: "contended", Clients: 64, OpsPerSec: ops[0], Latency: lat}
		b := &Result{System: "etcd", Workload: "contended", Clients: 64, OpsPerSec: ops[1], Latency: lat}
		if i%2 == 1 {
			a, b = b, a
		}
		rs = append(rs, a, b)
	}
	var buf bytes.Buffer
	if err := Compare(&buf, rs, "leasefence", "etcd"); err != nil {
		t.Fatal(err)
	}
	// Ratios 3, 9, 4: the median is 4, not the mean 5.33; range 3–9.
	for _, want := range []string{"4.00x", "3.00–9.00", " 3 "} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("compare lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestCheckLoopbackRefusesOtherHosts(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7001": true, "[::1]:7001": true, "localhost:1": true,
		"10.0.0.1:7001": false, "example.com:2379": false, "nohost": false,
	} {
		if err := CheckLoopback(addr); (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v", addr, err)
		}
	}
}
