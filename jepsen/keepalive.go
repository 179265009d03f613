package jepsen

import (
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// The keep-alive workload (issue 15 §3, "realistic ttls"): workers that
// hold leases with the ttls services use (10 s and 30 s) across idle gaps
// longer than a ttl, kept alive only by the client library's keep-alive
// stream, and count, per lease, the keep-alive streams opened and the
// renewals sent while it was held.

// KeepAlivePrefix starts the resources of the keep-alive workload (inside
// WatchPrefix: their grants are checked like every other).
const KeepAlivePrefix = "jk/"

// KeepAliveTTLs are the ttls the keep-alive workers lease with.
var KeepAliveTTLs = []time.Duration{10 * time.Second, 30 * time.Second}

// kaCounter counts, for a worker's client, the keep-alive streams opened
// and the renewals sent per lease, from a stream interceptor (the client
// library's own counters are per client, not per lease).
type kaCounter struct {
	streams atomic.Int64
	mu      sync.Mutex
	sent    map[string]int // lease id (hex) -> renewals sent
}

func (k *kaCounter) renewals(lease string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sent[lease]
}

// intercept is a grpc.StreamClientInterceptor.
func (k *kaCounter) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != api.LeaseService_KeepAlive_FullMethodName {
		return s, err
	}
	k.streams.Add(1)
	return &kaStream{ClientStream: s, k: k}, nil
}

type kaStream struct {
	grpc.ClientStream
	k *kaCounter
}

func (s *kaStream) SendMsg(m any) error {
	if r, ok := m.(*api.KeepAliveRequest); ok {
		s.k.mu.Lock()
		if s.k.sent == nil {
			s.k.sent = map[string]int{}
		}
		s.k.sent[hex.EncodeToString(r.LeaseId)]++
		s.k.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// keepAliveCycle acquires a keep-alive resource with one of KeepAliveTTLs,
// holds it idle for between half a ttl and one and a half (a fenced write
// at the start and, when the lease is still live, at the end), releases
// it, and records the counts (OpKeepAlive).
func (w *workerState) keepAliveCycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	ttl := KeepAliveTTLs[w.rng.IntN(len(KeepAliveTTLs))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	// The worker holds one lease at a time, and the client closes its
	// stream when it keeps none: a hold opens one stream, on the acquire.
	streams0 := w.ka.streams.Load()
	lease, err := w.acquireTTL(base+"-a", res, ttl)
	if err != nil {
		w.sleep(200*time.Millisecond, time.Second)
		return
	}
	id := lease.ID()
	hexID := hex.EncodeToString(id[:])
	start := history.Now()
	tok := fence.TokenOf(lease)
	safe := func() int64 { return w.safeUntilNs(lease) }
	w.write(base+"-w", res, tok, lease.ID().String(), lease.Err, safe)
	hold := ttl/2 + time.Duration(w.rng.Int64N(int64(ttl)))
	for end := time.Now().Add(hold); time.Now().Before(end) && !w.stop.Load() && lease.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
	}
	if lease.Err() == nil {
		w.write(base+"-x", res, tok, lease.ID().String(), lease.Err, safe)
	}
	held := history.Now() - start
	lerr := lease.Err()
	w.release(base+"-r", res, lease)
	// Stamped when the hold ended, not after the release (which takes
	// seconds on a slow disk): the checkers judge the faults over
	// [TimeNs-HeldNs, TimeNs].
	rec := history.Record{Kind: history.Complete, Op: base + "-k", Type: checker.OpKeepAlive, Resource: res, Token: lease.Token(), Value: hexID, Result: history.OK,
		TimeNs: start + held, HeldNs: held, IntervalNs: int64(ttl / 3), Renewals: w.ka.renewals(hexID), Streams: int(w.ka.streams.Load() - streams0)}
	if lerr != nil {
		rec.Result, rec.Error = history.Fail, "lease ended while held: "+lerr.Error()
	}
	w.emit(rec)
	w.sleep(100*time.Millisecond, 500*time.Millisecond)
}

// acquireTTL is acquire with a ttl of its own.
func (w *workerState) acquireTTL(op, res string, ttl time.Duration) (*client.Lease, error) {
	acq := history.Record{Kind: history.Invoke, Op: op, Type: history.OpAcquire, Resource: res, RequestID: RequestIDOf(op)}
	w.emit(acq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	lease, err := w.leases.Acquire(ctx, res, client.WithTTL(ttl), client.WithHolder(w.cfg.ID), client.WithRequestID(acq.RequestID))
	cancel()
	done := acq
	done.Kind, done.TimeNs = history.Complete, 0
	if err != nil {
		done.Result, done.Error = acquireOutcome(err), acquireError(err)
	} else {
		done.Result, done.Token, done.Lease, done.SafeUntilNs = history.OK, lease.Token(), lease.ID().String(), w.safeUntilNs(lease)
	}
	w.emit(done)
	return lease, err
}
