package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// BenchmarkKeepAlive10000Leases measures the renewals per second one
// client sustains for 10 000 leases on its one keep-alive stream, against
// a three-node cluster in this process (real gRPC, raft-boltdb). Each lease
// asks for a renewal every 200 ms (50 000/s demanded), so the figure is the
// capacity of the path, not the demand.
//
//	go test -run '^$' -bench KeepAlive10000 -benchtime 1x ./client/
func BenchmarkKeepAlive10000Leases(b *testing.B) { benchmarkKeepAlive(b, 10000) }

// BenchmarkKeepAlive100000Leases is the same with 100 000 leases (issue 6's
// scale target); acquiring them takes a while.
//
//	go test -run '^$' -bench KeepAlive100000 -benchtime 1x -timeout 20m ./client/
func BenchmarkKeepAlive100000Leases(b *testing.B) { benchmarkKeepAlive(b, 100000) }

func benchmarkKeepAlive(b *testing.B, leases int) {
	addrs, stop := testcluster.StartEmbeddedN(3)
	defer stop()
	c, err := client.New(client.Config{Endpoints: addrs, KeepAliveInterval: 200 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < leases; i += 256 {
				if _, err := c.Acquire(ctx, fmt.Sprintf("ka/%d", i), client.WithTTL(30*time.Second)); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before := c.Stats()
		start := time.Now()
		time.Sleep(5 * time.Second)
		after := c.Stats()
		el := time.Since(start).Seconds()
		b.ReportMetric(float64(after.RenewalsConfirmed-before.RenewalsConfirmed)/el, "renewals/s")
		b.ReportMetric(float64(after.Streams), "streams")
		if after.Leases != leases || after.RenewalsRefused != 0 {
			b.Fatalf("leases %d, refused %d", after.Leases, after.RenewalsRefused)
		}
	}
}
