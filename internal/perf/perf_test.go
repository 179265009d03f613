// Package perf holds measurements with real leased processes (built
// without the race detector) that are too slow or too heavy for make test.
// They are benchmarks: run them by name, one at a time, on a quiet machine.
package perf

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/testcluster"
)

func start(b *testing.B, extra ...string) *testcluster.Cluster {
	bin, cleanup, err := testcluster.BuildForBenchmarks()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	// Default timing (not testcluster's short test settings), but verbose
	// logs off.
	saved := testcluster.Defaults
	testcluster.Defaults = []string{"--insecure", "--log-level", "warn"}
	defer func() { testcluster.Defaults = saved }()
	return testcluster.Start(b, bin, 3, extra...)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkFailover kills the leader with SIGKILL 20 times and measures
// the time from the kill to the first successful acquire (a client trying
// every node in turn), with default raft settings.
//
//	go test -run '^$' -bench Failover -benchtime 1x -timeout 20m ./internal/perf/
func BenchmarkFailover(b *testing.B) {
	c := start(b)
	var gaps []time.Duration
	for k := 0; k < 20; k++ {
		li := c.Leader()
		killed := time.Now()
		c.Kill(li, syscall.SIGKILL)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			ok := false
			for i := range c.Procs {
				if !c.Running(i) {
					continue
				}
				_, err := c.Lease(i).Acquire(ctx, &api.AcquireRequest{Resource: fmt.Sprintf("fo/%d", k), Ttl: durationpb.New(10 * time.Second)})
				if err == nil {
					ok = true
					break
				}
			}
			cancel()
			if ok {
				break
			}
		}
		gaps = append(gaps, time.Since(killed))
		c.Start(li)
		c.Leader()
		time.Sleep(time.Second) // let the restarted node catch up before the next kill
	}
	b.ReportMetric(percentile(gaps, 0.5).Seconds(), "median-s")
	b.ReportMetric(percentile(gaps, 0.9).Seconds(), "p90-s")
	b.ReportMetric(percentile(gaps, 1).Seconds(), "max-s")
	b.Logf("failover gaps: %v", gaps)
}

func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return -1
}

// acquireP99 measures 2 000 sequential acquire+release cycles' acquire
// latency on one resource through the leader.
func acquireP99(b *testing.B, l api.LeaseServiceClient) time.Duration {
	var lat []time.Duration
	for i := 0; i < 2000; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		r, err := l.Acquire(ctx, &api.AcquireRequest{Resource: "probe", Ttl: durationpb.New(10 * time.Second)})
		lat = append(lat, time.Since(t0))
		if err == nil {
			_, _ = l.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
		}
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	return percentile(lat, 0.99)
}

// BenchmarkMillionLeases holds 1 000 000 live leases in a three-node
// cluster of leased processes and reports each node's resident memory and
// the acquire p99 at 1 000 and at 1 000 000 live leases.
//
//	go test -run '^$' -bench MillionLeases -benchtime 1x -timeout 30m ./internal/perf/
func BenchmarkMillionLeases(b *testing.B) {
	c := start(b, "--max-ttl", "1h")
	li := c.Leader()
	lc := c.Lease(li)
	fill := func(from, to int) {
		var wg sync.WaitGroup
		const workers = 256
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := from + w; i < to; i += workers {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := lc.Acquire(ctx, &api.AcquireRequest{Resource: fmt.Sprintf("m/%07d", i), Ttl: durationpb.New(time.Hour), RequestId: fmt.Sprintf("m-%07d", i)})
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
	}
	fill(0, 1000)
	p99small := acquireP99(b, lc)
	start := time.Now()
	fill(1000, 1000000)
	b.Logf("granted 999 000 leases in %v", time.Since(start))
	p99big := acquireP99(b, lc)
	var maxRSS float64
	for i := range c.Procs {
		maxRSS = max(maxRSS, rssMB(c.Pid(i)))
	}
	b.ReportMetric(maxRSS, "max-node-RSS-MB")
	b.ReportMetric(float64(p99small.Microseconds())/1000, "p99-ms@1k")
	b.ReportMetric(float64(p99big.Microseconds())/1000, "p99-ms@1M")
}
