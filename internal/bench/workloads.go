package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/bench/runner"
)

// setupTimeout bounds acquiring (and releasing) the leases a workload holds
// in the background.
const setupTimeout = 5 * time.Minute

// setupWorkers is how many goroutines acquire and release setup leases.
const setupWorkers = 64

type pool struct {
	clients []*client.Client
}

// newPool makes n clients. Each starts at endpoints[0], or, with
// cfg.Spread, client i at endpoints[i mod len] (the others follow it, for
// failover).
func newPool(cfg Config, endpoints []string, n int) (*pool, error) {
	p := &pool{}
	for i := range n {
		eps := endpoints
		if cfg.Spread {
			k := i % len(endpoints)
			eps = append(slices.Clone(endpoints[k:]), endpoints[:k]...)
		}
		c, err := client.New(client.Config{Endpoints: eps, KeepAliveInterval: cfg.KeepAliveInterval})
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

// of returns the client worker w uses.
func (p *pool) of(w int) *client.Client { return p.clients[w%len(p.clients)] }

func (p *pool) close() {
	for _, c := range p.clients {
		c.Close()
	}
}

// holdAll acquires one lease on each resource, from the pool's clients
// round robin, with setupWorkers goroutines. The leases are kept alive.
func holdAll(ctx context.Context, p *pool, resources []string, ttl time.Duration) ([]*client.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	leases := make([]*client.Lease, len(resources))
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, setupWorkers)
	for range min(setupWorkers, len(resources)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(resources) || ctx.Err() != nil {
					return
				}
				l, err := p.of(i).Acquire(ctx, resources[i], client.WithTTL(ttl), client.WithHolder("leasebench"))
				if err != nil {
					errc <- fmt.Errorf("setup acquire %s: %w", resources[i], err)
					cancel()
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		releaseAll(leases)
		return nil, err
	}
	return leases, nil
}

// releaseAll releases every non-nil lease, bounded by setupTimeout.
func releaseAll(leases []*client.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(setupWorkers, len(leases)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(leases) || ctx.Err() != nil {
					return
				}
				if leases[i] != nil {
					_ = leases[i].Release(ctx)
				}
			}
		}()
	}
	wg.Wait()
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func runWorkload(ctx context.Context, cfg Config, endpoints []string, prefix, workload string, n int) (*runner.Result, error) {
	phase := runner.Phase{Concurrency: n, Warmup: cfg.Warmup, Duration: cfg.Duration, MaxOps: cfg.MaxOps}
	switch workload {
	case Renew:
		return runRenew(ctx, cfg, endpoints, prefix, n)
	case RenewUnary:
		return runRenewUnary(ctx, cfg, endpoints, prefix, n)
	}
	p, err := newPool(cfg, endpoints, min(cfg.Conns, n))
	if err != nil {
		return nil, err
	}
	defer p.close()
	own := names(prefix+"own/", n) // one resource per worker
	shared := names(prefix+"shared/", cfg.Resources)
	cycle := func(ctx context.Context, w int) error {
		l, err := p.of(w).Acquire(ctx, own[w], client.WithTTL(cfg.TTL))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	contend := func(ctx context.Context, w int, i int64) (runner.Sample, error) {
		l, err := p.of(w).Acquire(ctx, shared[(int64(w)+i)%int64(len(shared))], client.WithTTL(cfg.TTL))
		if errors.Is(err, client.ErrHeld) {
			return runner.Sample{Refused: true}, nil
		}
		if err != nil {
			return runner.Sample{}, err
		}
		return runner.Sample{}, l.Release(ctx)
	}
	var held []*client.Lease
	if workload == Read || workload == Mixed {
		held, err = holdAll(ctx, p, names(prefix+"held/", cfg.Resources), cfg.TTL)
		if err != nil {
			return nil, err
		}
		defer releaseAll(held)
	}
	read := func(ctx context.Context, w int, i int64) error {
		g, err := p.of(w).Get(ctx, held[(int64(w)+i)%int64(len(held))].Resource())
		if err == nil && g.Lease == nil {
			err = errors.New("read: a held resource reads as free")
		}
		return err
	}
	var (
		op    runner.Op
		notes string
	)
	switch workload {
	case AcquireRelease:
		notes = "one op = Acquire + Release of the worker's own resource (two Raft commits)"
		op = func(ctx context.Context, w int, _ int64) (runner.Sample, error) {
			return runner.Sample{}, cycle(ctx, w)
		}
	case Contended:
		notes = fmt.Sprintf("one op = a granted Acquire + Release on one of %d shared resources; refusals (held) apart", len(shared))
		op = contend
	case Read:
		notes = fmt.Sprintf("one op = a linearizable Get of one of %d held resources (ReadIndex: a quorum round)", len(held))
		op = func(ctx context.Context, w int, i int64) (runner.Sample, error) {
			return runner.Sample{}, read(ctx, w, i)
		}
	case Mixed:
		notes = fmt.Sprintf("per 10 ops: 6 linearizable reads, 3 acquire+release cycles on own resources, 1 acquire on %d shared resources; %d held leases kept alive", len(shared), len(held))
		phase.Kinds = []string{"read", "cycle", "contended"}
		op = func(ctx context.Context, w int, i int64) (runner.Sample, error) {
			switch i % 10 {
			case 0, 2, 4, 5, 7, 8:
				return runner.Sample{Kind: 0}, read(ctx, w, i)
			case 1, 3, 6:
				return runner.Sample{Kind: 1}, cycle(ctx, w)
			default:
				s, err := contend(ctx, w, i)
				s.Kind = 2
				return s, err
			}
		}
	default:
		return nil, fmt.Errorf("unknown workload %q", workload)
	}
	phase.Probe = func(ctx context.Context) map[string]float64 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := status(ctx, endpoints[0])
		if err != nil {
			return nil
		}
		return map[string]float64{"raft_entries": float64(st.AppliedIndex)}
	}
	r, err := runner.Measure(ctx, phase, op)
	if err != nil {
		return nil, err
	}
	r.Notes = notes
	if e := r.Extra["raft_entries_per_s"]; e > 0 && workload == AcquireRelease {
		r.Extra["commands_per_raft_entry"] = 2 * r.OpsPerSec / e
	}
	return r, nil
}

// runRenew holds cfg.Leases live leases across n clients (each one
// keep-alive stream) and counts the renewals the clients saw confirmed
// during the window. Every renewal is a Raft commit (batched).
func runRenew(ctx context.Context, cfg Config, endpoints []string, prefix string, n int) (*runner.Result, error) {
	p, err := newPool(cfg, endpoints, n)
	if err != nil {
		return nil, err
	}
	defer p.close()
	t0 := time.Now()
	leases, err := holdAll(ctx, p, names(prefix+"live/", cfg.Leases), cfg.TTL)
	if err != nil {
		return nil, err
	}
	setup := time.Since(t0)
	defer releaseAll(leases)
	stats := func() client.Stats {
		var s client.Stats
		for _, c := range p.clients {
			cs := c.Stats()
			s.Leases += cs.Leases
			s.RenewalsSent += cs.RenewalsSent
			s.RenewalsConfirmed += cs.RenewalsConfirmed
			s.RenewalsRefused += cs.RenewalsRefused
		}
		return s
	}
	sleep := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(cfg.Warmup); err != nil {
		return nil, err
	}
	before, start := stats(), time.Now()
	if err := sleep(cfg.Duration); err != nil {
		return nil, err
	}
	after, el := stats(), time.Since(start).Seconds()
	interval := cfg.KeepAliveInterval
	if interval == 0 {
		interval = cfg.TTL / 3
	}
	confirmed := after.RenewalsConfirmed - before.RenewalsConfirmed
	r := &runner.Result{
		Clients: n, Warmup: runner.Secs(cfg.Warmup), Duration: runner.Secs(cfg.Duration), Elapsed: el,
		Ops: int64(confirmed), OpsPerSec: float64(confirmed) / el,
		Refused: int64(after.RenewalsRefused - before.RenewalsRefused),
		Extra: map[string]float64{
			"leases":                  float64(cfg.Leases),
			"leases_live_at_end":      float64(after.Leases),
			"renewals_sent_per_s":     float64(after.RenewalsSent-before.RenewalsSent) / el,
			"renewals_demanded_per_s": float64(cfg.Leases) / interval.Seconds(),
			"setup_acquires_per_s":    float64(cfg.Leases) / setup.Seconds(),
		},
		Notes: "one op = a keep-alive renewal confirmed by the cluster (client.Stats); no per-renewal latency is recorded",
	}
	r.RefusedPerSec = float64(r.Refused) / el
	return r, nil
}

// runRenewUnary measures unary Renew calls, etcd's KeepAliveOnce's
// counterpart: each of n workers holds one lease acquired through the API
// (no keep-alive stream: the lease lives by these calls alone) and renews
// it again and again. Every renewal is a Raft commit (batched).
func runRenewUnary(ctx context.Context, cfg Config, endpoints []string, prefix string, n int) (*runner.Result, error) {
	p, err := newPool(cfg, endpoints, min(cfg.Conns, n))
	if err != nil {
		return nil, err
	}
	defer p.close()
	ids := make([][]byte, n)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		for w, id := range ids {
			if id != nil {
				_ = p.of(w).Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
					_, err := api.NewLeaseServiceClient(conn).Release(ctx, &api.ReleaseRequest{LeaseId: id})
					return err
				})
			}
		}
	}()
	own := names(prefix+"own/", n)
	for w := range n {
		req := &api.AcquireRequest{Resource: own[w], Holder: "leasebench", Ttl: durationpb.New(cfg.TTL), RequestId: client.NewRequestID()}
		err := p.of(w).Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			resp, err := api.NewLeaseServiceClient(conn).Acquire(ctx, req)
			if err == nil {
				ids[w] = resp.GetLease().GetId()
			}
			return err
		}, client.Mutation())
		if err != nil {
			return nil, fmt.Errorf("setup acquire %s: %w", own[w], err)
		}
	}
	phase := runner.Phase{Concurrency: n, Warmup: cfg.Warmup, Duration: cfg.Duration, MaxOps: cfg.MaxOps}
	r, err := runner.Measure(ctx, phase, func(ctx context.Context, w int, _ int64) (runner.Sample, error) {
		return runner.Sample{}, p.of(w).Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := api.NewLeaseServiceClient(conn).Renew(ctx, &api.RenewRequest{LeaseId: ids[w]})
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	r.Notes = "one op = a unary Renew of the worker's own lease, which lives by these calls alone (one Raft commit, batched)"
	return r, nil
}
