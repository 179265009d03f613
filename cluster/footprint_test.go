package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// BenchmarkEmbeddedFootprint measures what embedded nodes cost their host
// process: goroutines and resident memory (VmRSS from /proc/self/status,
// read after debug.FreeOSMemory) above the test binary's own, once the cluster has been idle for 5 s, and
// again with 1 000 leases held and kept alive by one in-process client
// (ttl 10 s, renewed every 3.3 s) for 10 s. nodes=1 is an application that
// embeds its only node (the leader); nodes=3 puts a whole three-node
// cluster in the process, so one node's share is about a third (the leader
// costs more than a follower). Run each case in a process of its own: the
// figures are the process's, and a case run after another starts from the
// other's leftovers.
//
//	go test -run '^$' -bench 'EmbeddedFootprint/nodes=1$' -benchtime 1x ./cluster/
//	go test -run '^$' -bench 'EmbeddedFootprint/nodes=3$' -benchtime 1x ./cluster/
func BenchmarkEmbeddedFootprint(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				footprint(b, n)
			}
		})
	}
}

func footprint(b *testing.B, n int) {
	runtime.GC()
	time.Sleep(time.Second) // goroutines of an earlier round end
	g0, rss0 := runtime.NumGoroutine(), vmRSS(b)
	nodes := testcluster.Nodes(b, n)
	time.Sleep(5 * time.Second)
	g1, rss1 := runtime.NumGoroutine(), vmRSS(b)
	var leader *cluster.Node
	for _, nd := range nodes {
		if nd.IsLeader() {
			leader = nd
		}
	}
	c, err := client.New(client.Config{InProcess: &client.InProcess{Addr: leader.Addr(), Dial: leader.DialInProcess}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		if _, err := c.Acquire(ctx, fmt.Sprintf("footprint/%d", i), client.WithTTL(10*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second) // a few keep-alive rounds
	g2, rss2 := runtime.NumGoroutine(), vmRSS(b)
	if d := os.Getenv("FOOTPRINT_GOROUTINES"); d != "" {
		f, _ := os.Create(filepath.Join(d, fmt.Sprintf("goroutines-%d.txt", n)))
		pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
	}
	b.ReportMetric(float64(rss0)/(1<<20), "base-rss-MiB")
	b.ReportMetric(float64(g1-g0), "idle-goroutines")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(float64(g2-g0), "1000-leases-goroutines")
	b.ReportMetric(float64(rss2-rss0)/(1<<20), "1000-leases-rss-MiB")
}

// vmRSS is this process's resident set in bytes, after the runtime has
// returned what it can to the OS.
func vmRSS(tb testing.TB) int64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
