// Package perf holds measurements with real leased processes (built
// without the race detector) that are too slow or too heavy for make test.
// They are benchmarks: run them by name, one at a time, on a quiet machine.
package perf

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/memlimit"
	"github.com/leasefence/leasefence/internal/testcluster"
)

func start(b *testing.B, extra ...string) *testcluster.Cluster { return startIn(b, nil, extra...) }

// startIn starts three nodes, in the given cgroups when cgroups is not nil.
func startIn(b *testing.B, cgroups []string, extra ...string) *testcluster.Cluster {
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
	if cgroups != nil {
		return testcluster.StartInCgroups(b, bin, cgroups, extra...)
	}
	return testcluster.Start(b, bin, 3, extra...)
}

// memoryCgroups makes n memory cgroups limited to limit (a size such as
// 1GiB) for the nodes to run in, and removes them at the end. It needs
// root and a cgroup v1 memory controller, or cgroup v2 with the memory
// controller available.
func memoryCgroups(b *testing.B, limit string, n int) []string {
	bytes, err := memlimit.ParseSize(limit)
	if err != nil || bytes <= 0 {
		b.Fatalf("LEASEFENCE_PERF_MEMORY_LIMIT: %q is not a size (1GiB, 800MiB)", limit)
	}
	base, limitFile := "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	if _, err := os.Stat(filepath.Join(base, limitFile)); err != nil {
		base, limitFile = "/sys/fs/cgroup", "memory.max"
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			b.Fatalf("no memory cgroup to use (needs root; cgroup v1 memory or v2): %v", err)
		}
	}
	var dirs []string
	for i := 0; i < n; i++ {
		dir := filepath.Join(base, fmt.Sprintf("leasefence-perf-%d-n%d", os.Getpid(), i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatalf("memory cgroup: %v", err)
		}
		b.Cleanup(func() { os.Remove(dir) }) // after the cluster's cleanup killed the nodes
		if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(bytes, 10)), 0o644); err != nil {
			b.Fatalf("memory cgroup limit: %v", err)
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

// cgroupReport says what a node's memory cgroup saw: its peak charge
// (which counts page cache too, reclaimable under the limit), how often
// the limit was hit, and how many processes the kernel killed for it.
func cgroupReport(dir string) string {
	read := func(name string) string {
		v, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(v))
	}
	field := func(name, key string) string {
		for _, line := range strings.Split(read(name), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == key {
				return v
			}
		}
		return "?"
	}
	mib := func(s string) string {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.0f", n/(1<<20))
	}
	if read("memory.limit_in_bytes") != "" { // v1
		return fmt.Sprintf("cgroup limit %s MiB, peak charge %s MiB (page cache included), limit hit %s times, oom kills %s",
			mib(read("memory.limit_in_bytes")), mib(read("memory.max_usage_in_bytes")), read("memory.failcnt"), field("memory.oom_control", "oom_kill"))
	}
	return fmt.Sprintf("cgroup limit %s MiB, peak charge %s MiB (page cache included), oom kills %s",
		mib(read("memory.max")), mib(read("memory.peak")), field("memory.events", "oom_kill"))
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkFailover kills the leader with SIGKILL 20 times and measures
// the time from the kill to the first successful acquire (a client trying
// every node in turn), with default raft settings; LEASEFENCE_PERF_FLAGS
// adds leased flags (space separated) to compare others.
//
//	go test -run '^$' -bench 'Failover$' -benchtime 1x -timeout 20m ./internal/perf/
//	LEASEFENCE_PERF_FLAGS='--heartbeat-timeout 300ms ...' go test ... (same)
func BenchmarkFailover(b *testing.B) {
	c := start(b, strings.Fields(os.Getenv("LEASEFENCE_PERF_FLAGS"))...)
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

func rssMB(pid int) float64 { return procStatusMB(pid, "VmRSS:") }

// procStatusMB reads one kB field of /proc/PID/status (VmRSS, RssAnon,
// RssFile) in MB; -1 if it cannot.
func procStatusMB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return -1
}

// withPprof restarts every node of c with --pprof on a metrics address of
// its own and returns those addresses (node i at index i). Done on an
// empty cluster, before any load.
func withPprof(b *testing.B, c *testcluster.Cluster) []string {
	addrs := testcluster.FreeAddrs(b, len(c.Procs))
	for i, p := range c.Procs {
		c.Kill(i, syscall.SIGTERM)
		p.Args = append(p.Args, "--pprof", "--metrics-listen", addrs[i])
		c.Start(i)
	}
	c.Leader()
	return addrs
}

// fetch saves http://addr/path into file.
func fetch(b *testing.B, addr, path, file string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		b.Logf("fetch %s%s: %v", addr, path, err)
		return
	}
	defer resp.Body.Close()
	out, err := os.Create(file)
	if err != nil {
		b.Logf("fetch: %v", err)
		return
	}
	defer out.Close()
	_, _ = io.Copy(out, resp.Body)
}

// metric returns the value of an unlabelled Prometheus metric at addr
// (-1 if absent).
func metric(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// acquireLatencies measures 2 000 sequential acquire+release cycles on one
// resource through the leader and returns each acquire's latency, in the
// order taken. An attempt that fails (a leader change on a loaded machine)
// is not a sample: it is logged and counted in errs, and the next attempt
// goes to the new leader.
func acquireLatencies(b *testing.B, c *testcluster.Cluster) (lat []time.Duration, errs int) {
	l := c.Lease(c.Leader())
	for len(lat) < 2000 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		r, err := l.Acquire(ctx, &api.AcquireRequest{Resource: "probe", Ttl: durationpb.New(10 * time.Second)})
		d := time.Since(t0)
		if err == nil {
			lat = append(lat, d)
			_, err = l.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
		}
		cancel()
		if err != nil {
			errs++
			if errs > 100 {
				b.Fatalf("probe: %d errors, last %v", errs, err)
			}
			if errs <= 3 { // the benchmark's log is truncated: keep room for the node figures
				b.Logf("probe: %v (after %v); finding the leader again", err, d)
			}
			// The probe resource may still be held by a lost release.
			time.Sleep(time.Second)
			l = c.Lease(c.Leader())
		}
	}
	return lat, errs
}

// BenchmarkMillionLeases holds 1 000 000 live leases in a three-node
// cluster of leased processes and reports each node's resident memory and
// the acquire p99 at 1 000 and at 1 000 000 live leases.
//
//	go test -run '^$' -bench MillionLeases -benchtime 1x -timeout 40m ./internal/perf/
//
// With LEASEFENCE_PERF_PROFILES=DIR the nodes also serve pprof, and DIR
// receives, per node, the heap profile at 1 000 000 leases (heap-nN.pprof,
// after a GC), the leader's CPU profile and execution trace of the first
// seconds of each probe (cpu-leader-1k.pprof, trace-leader-1k.out, and the
// same with 1M), and every probe latency at 1 000 and 1 000 000 in
// microseconds, in the order taken (lat-1k.txt, lat-1M.txt).
//
// With LEASEFENCE_PERF_MEMORY_LIMIT=1GiB (root) each node runs in its own
// memory cgroup of that size, as in a container, and leased's default
// --memory-limit auto takes 90% of it; the benchmark fails if a node died.
func BenchmarkMillionLeases(b *testing.B) {
	var c *testcluster.Cluster
	var cgroups []string
	if lim := os.Getenv("LEASEFENCE_PERF_MEMORY_LIMIT"); lim != "" {
		cgroups = memoryCgroups(b, lim, 3)
		c = startIn(b, cgroups, "--max-ttl", "1h", "--skew-margin", "400ms")
	} else {
		c = start(b, "--max-ttl", "1h", "--skew-margin", "400ms")
	}
	profDir := os.Getenv("LEASEFENCE_PERF_PROFILES")
	var metricsAddrs []string
	if profDir != "" {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			b.Fatal(err)
		}
		metricsAddrs = withPprof(b, c)
	}
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
					req := &api.AcquireRequest{Resource: fmt.Sprintf("m/%07d", i), Ttl: durationpb.New(time.Hour), RequestId: fmt.Sprintf("m-%07d", i)}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := lc.Acquire(ctx, req)
					cancel()
					if err != nil {
						// A leader change on the loaded machine: retry
						// through any node; the request id makes it safe.
						err = c.Any(func(l api.LeaseServiceClient) error {
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							defer cancel()
							_, err := l.Acquire(ctx, req)
							return err
						})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
	}
	saveLat := func(name string, lat []time.Duration) {
		if profDir == "" {
			return
		}
		var sb strings.Builder
		for _, d := range lat {
			fmt.Fprintln(&sb, d.Microseconds())
		}
		_ = os.WriteFile(filepath.Join(profDir, name), []byte(sb.String()), 0o644)
	}
	// profileLeader starts the leader's CPU profile and execution trace
	// of the probe's first seconds, when asked for; the returned function
	// waits for both.
	profileLeader := func(at string) (wait func()) {
		var wg sync.WaitGroup
		if profDir != "" {
			wg.Add(2)
			go func() {
				defer wg.Done()
				fetch(b, metricsAddrs[li], "/debug/pprof/profile?seconds=6", filepath.Join(profDir, "cpu-leader-"+at+".pprof"))
			}()
			go func() {
				defer wg.Done()
				fetch(b, metricsAddrs[li], "/debug/pprof/trace?seconds=3", filepath.Join(profDir, "trace-leader-"+at+".out"))
			}()
		}
		return wg.Wait
	}
	fill(0, 1000)
	wait := profileLeader("1k")
	lat, errsSmall := acquireLatencies(b, c)
	saveLat("lat-1k.txt", lat)
	p99small := percentile(lat, 0.99)
	wait()
	start := time.Now()
	fill(1000, 1000000)
	b.Logf("granted 999 000 leases in %v", time.Since(start))
	if l := c.Leader(); l != li {
		b.Logf("leader changed during the fill: n%d, was n%d", l+1, li+1)
		li = l
	}
	wait = profileLeader("1M")
	lat, errsBig := acquireLatencies(b, c)
	saveLat("lat-1M.txt", lat)
	p99big := percentile(lat, 0.99)
	wait()
	var maxRSS float64
	for i := range c.Procs {
		pid := c.Pid(i)
		rss := rssMB(pid)
		maxRSS = max(maxRSS, rss)
		if pid == 0 || !c.Running(i) {
			b.Errorf("node %d is not running (killed for memory?)", i)
		}
		line := fmt.Sprintf("node %d: RSS %.0f MB (anon %.0f, file %.0f)", i, rss, procStatusMB(pid, "RssAnon:"), procStatusMB(pid, "RssFile:"))
		if cgroups != nil {
			line += "; " + cgroupReport(cgroups[i])
		}
		if fi, err := os.Stat(filepath.Join(c.Procs[i].DataDir, "raft.db")); err == nil {
			line += fmt.Sprintf(", raft.db %.0f MB", float64(fi.Size())/(1<<20))
		}
		if profDir != "" {
			a := metricsAddrs[i]
			line += fmt.Sprintf(", heap in use %.0f MB, heap sys %.0f MB, heap released %.0f MB",
				metric(a, "go_memstats_heap_inuse_bytes")/1e6, metric(a, "go_memstats_heap_sys_bytes")/1e6, metric(a, "go_memstats_heap_released_bytes")/1e6)
			if lim := metric(a, "go_gc_gomemlimit_bytes"); lim < 1<<62 {
				line += fmt.Sprintf(", Go memory limit %.0f MiB", lim/(1<<20))
			}
			fetch(b, a, "/debug/pprof/heap?gc=1", filepath.Join(profDir, fmt.Sprintf("heap-n%d.pprof", i+1)))
		}
		b.Log(line)
	}
	b.ReportMetric(maxRSS, "max-node-RSS-MB")
	b.ReportMetric(float64(p99small.Microseconds())/1000, "p99-ms@1k")
	b.ReportMetric(float64(p99big.Microseconds())/1000, "p99-ms@1M")
	b.ReportMetric(float64(p99big)/float64(p99small), "p99-ratio")
	b.ReportMetric(float64(errsSmall+errsBig), "probe-errors")
}
