package jepsen

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
)

// probeDeadline is each probe call's deadline: far longer than the bound,
// so that a node that waits out its caller's deadline shows as a window
// longer than the bound.
const probeDeadline = 8 * time.Second

// probeAvailability pins one prober to each node: a plain gRPC caller (no
// client library, no failover, as any language's gRPC client pinned to one
// address behind a load balancer is) that acquires and releases a resource
// of its own through that node, with a request id, every 100 ms, and
// records every call in out until ctx ends (a call counts as served when
// the service decided it, see served). What it measures is the
// node's own behaviour when the leader goes silent: whether its forwarding
// gives up on that leader and finds the next.
func probeAvailability(ctx context.Context, ids, addrs []string, out *history.Writer) {
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := grpc.NewClient(addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return
			}
			defer conn.Close()
			lc := api.NewLeaseServiceClient(conn)
			for n := 0; ctx.Err() == nil; n++ {
				s := history.ProbeSample{Node: ids[i], InvokeNs: history.Now()}
				cctx, cancel := context.WithTimeout(ctx, probeDeadline)
				r, err := lc.Acquire(cctx, &api.AcquireRequest{
					Resource:  "probe/" + ids[i], // outside ResourcePrefix: not watched, not checked
					Holder:    "probe-" + ids[i],
					Ttl:       durationpb.New(2 * time.Second),
					RequestId: fmt.Sprintf("probe-%s-%d-%d", ids[i], s.InvokeNs, n),
				})
				if err == nil {
					_, err = lc.Release(cctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
				}
				cancel()
				if ctx.Err() != nil {
					return // the run ended: not a sample
				}
				s.CompleteNs, s.OK = history.Now(), served(err)
				if err != nil {
					s.Error = err.Error()
				}
				_ = out.Write(s)
				sleepCtx(ctx, 100*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// served reports whether a probe's call was served: it succeeded, or the
// service answered with a decision of its own (the probe resource still
// held by the probe's own lease, after a release whose answer was lost).
// Unavailable and deadline errors are not service.
func served(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.FailedPrecondition, codes.NotFound:
		return true
	}
	return false
}
