package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// BenchmarkAcquireReleaseCycle measures acquire+release cycles through a
// three-node cluster (real gRPC on loopback, raft-boltdb on disk), from one
// client and from 64 concurrent ones, each on its own resources.
//
//	go test -run '^$' -bench AcquireReleaseCycle -benchtime 3s ./cluster/
func BenchmarkAcquireReleaseCycle(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			tc := newTestCluster(b, 3, nil)
			li, _ := tc.leader()
			c := tc.client(li)
			ctx := context.Background()
			var seq atomic.Int64
			// RunParallel starts GOMAXPROCS x parallelism goroutines.
			b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				res := fmt.Sprintf("bench/%d", seq.Add(1))
				for pb.Next() {
					r, err := c.Acquire(ctx, acquireReq(res, 10*time.Second))
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}

// BenchmarkToStatusHeld is the answer to a refused Acquire, most of what
// the leader answers in the contended workload.
func BenchmarkToStatusHeld(b *testing.B) {
	err := &fsm.HeldError{Resource: "jobs/a", Holder: "w1", Token: 42, TimeLeft: 3 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if toStatus(err) == nil {
			b.Fatal("no status")
		}
	}
}
