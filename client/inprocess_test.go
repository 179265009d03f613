package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/testcluster"
)

func inProcessClient(tb testing.TB, nd *cluster.Node, cfg client.Config) *client.Client {
	tb.Helper()
	cfg.InProcess = &client.InProcess{Addr: nd.Addr(), Dial: nd.DialInProcess}
	return mustNew(tb, cfg)
}

// TestInProcessClientOnFollower: the Go client over an in-memory
// connection to an embedded follower acquires (forwarded to the leader),
// keeps the lease alive past its ttl, and releases; the next token is
// higher.
func TestInProcessClientOnFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := testcluster.Nodes(t, 3)
	var f *cluster.Node
	for _, nd := range nodes {
		if !nd.IsLeader() {
			f = nd
			break
		}
	}
	c := inProcessClient(t, f, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "inproc/job", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past the ttl: kept alive over the in-memory stream
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while kept alive in process: %v", err)
	}
	if time.Until(l.SafeUntil()) <= 0 {
		t.Fatalf("safe deadline passed: %v", l.SafeUntil())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "inproc/job", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("tokens %d then %d", l.Token(), l2.Token())
	}
	_ = l2.Release(ctx)
}

// TestInProcessClientFailsOver: an in-process client that also lists the
// other nodes moves to them when its own node stops.
func TestInProcessClientFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := testcluster.Nodes(t, 3)
	own := nodes[0]
	c := inProcessClient(t, own, client.Config{Endpoints: []string{nodes[1].Addr(), nodes[2].Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "inproc/failover", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	own.Close()
	l2, err := c.Acquire(ctx, "inproc/failover", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("acquire after the in-process node stopped: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("tokens %d then %d", l.Token(), l2.Token())
	}
	_ = l2.Release(ctx)
}

// BenchmarkCycleInProcess compares one client's acquire+release cycle on a
// one-node embedded cluster over loopback TCP and over the in-process
// connection, alternating the two in one run so that the machine's noise
// falls on both alike; it reports each one's p50 and their ratio.
//
//	go test -run '^$' -bench CycleInProcess -benchtime 2000x ./client/
func BenchmarkCycleInProcess(b *testing.B) {
	nd := testcluster.Nodes(b, 1)[0]
	tcp, err := client.New(client.Config{Endpoints: []string{nd.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer tcp.Close()
	mem := inProcessClient(b, nd, client.Config{})
	ctx := context.Background()
	cycle := func(c *client.Client, res string) time.Duration {
		start := time.Now()
		l, err := c.Acquire(ctx, res, client.WithTTL(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	cycle(tcp, "bench/tcp") // connect both before timing
	cycle(mem, "bench/mem")
	var tcpD, memD []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tcpD = append(tcpD, cycle(tcp, "bench/tcp"))
			memD = append(memD, cycle(mem, "bench/mem"))
		} else {
			memD = append(memD, cycle(mem, "bench/mem"))
			tcpD = append(tcpD, cycle(tcp, "bench/tcp"))
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	t, m := p50(tcpD), p50(memD)
	b.ReportMetric(float64(t.Microseconds()), "loopback-p50-µs")
	b.ReportMetric(float64(m.Microseconds()), "inprocess-p50-µs")
	b.ReportMetric(float64(m)/float64(t), "inprocess/loopback")
}
