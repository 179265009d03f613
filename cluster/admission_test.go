package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// overloadDetails returns the retry hint and whether err is an overload
// refusal as the error table writes it.
func overloadDetails(t *testing.T, err error) time.Duration {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("want ResourceExhausted, got %v", err)
	}
	var (
		hint   time.Duration
		hasRI  bool
		reason string
	)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			hint, hasRI = d.RetryDelay.AsDuration(), true
		case *errdetails.ErrorInfo:
			reason = d.Reason
		}
	}
	if !hasRI || hint < minRetryHint || hint > maxRetryHint || reason != api.ReasonOverloaded {
		t.Fatalf("refusal without its hint: RetryInfo %v (%v), reason %q", hasRI, hint, reason)
	}
	return hint
}

// TestFullAdmissionRefusesGrantsButLetsRenewalsThrough: with the leader's
// budget for grants spent, a new grant gets ResourceExhausted with a retry
// hint and changes nothing (the same request id later gets the scope's
// first token, not a replay), while renewals of a held lease, unary and on
// a keep-alive stream relayed by a follower, still commit. Past their own,
// larger budget renewals are refused too, with the hint on the stream. The
// budgets are occupied by raising the node's own pending counts: the
// commands that would hold them are the ones a real overload queues.
func TestFullAdmissionRefusesGrantsButLetsRenewalsThrough(t *testing.T) {
	const maxPending, maxGrants = 64, 8
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxPending, c.MaxPendingGrants = maxPending, maxGrants })
	li, ln := tc.leader()
	fi, _ := tc.follower()
	lc, fc := tc.client(li), tc.client(fi)
	ctx := ctxT(t)
	held, err := lc.Acquire(ctx, acquireReq("adm/held", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ka, err := fc.KeepAlive(ctx) // relayed to the leader
	if err != nil {
		t.Fatal(err)
	}
	keepAlive := func(seq uint64) *api.KeepAliveResponse {
		t.Helper()
		if err := ka.Send(&api.KeepAliveRequest{LeaseId: held.Lease.Id, Seq: seq}); err != nil {
			t.Fatal(err)
		}
		resp, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	ln.adm.pending[classGrant].Add(maxGrants) // the grants' budget is spent
	req := acquireReq("adm/new", 20*time.Second)
	req.RequestId = "adm-new-1"
	_, err = lc.Acquire(ctx, req)
	overloadDetails(t, err)
	_, err = fc.Acquire(ctx, req) // forwarded: the leader's refusal comes back as it is
	overloadDetails(t, err)
	g, err := lc.Get(ctx, &api.GetRequest{Resource: "adm/new"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Lease != nil || g.ScopeToken != 0 {
		t.Fatalf("a refused grant changed the state: %+v", g)
	}
	if r, err := lc.Renew(ctx, &api.RenewRequest{LeaseId: held.Lease.Id}); err != nil || r.Lease.Token != held.Lease.Token {
		t.Fatalf("renewal with the grants' budget spent: %v, %v", r, err)
	}
	if resp := keepAlive(1); resp.Code != 0 || resp.Lease.GetToken() != held.Lease.Token {
		t.Fatalf("keep-alive renewal with the grants' budget spent: %+v", resp)
	}

	ln.adm.pending[classHeld].Add(maxPending) // the renewals' budget is spent too
	_, err = lc.Renew(ctx, &api.RenewRequest{LeaseId: held.Lease.Id})
	overloadDetails(t, err)
	if resp := keepAlive(2); codes.Code(resp.Code) != codes.ResourceExhausted || resp.RetryAfter.AsDuration() < minRetryHint {
		t.Fatalf("keep-alive renewal past the budget: %+v, want ResourceExhausted with retry_after", resp)
	}

	ln.adm.pending[classGrant].Add(-maxGrants)
	ln.adm.pending[classHeld].Add(-maxPending)
	r, err := lc.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Replayed || r.Lease.Token != 1 {
		t.Fatalf("the refused request id, sent again: replayed %v, token %d; want a first grant with token 1", r.Replayed, r.Lease.Token)
	}
	if resp := keepAlive(3); resp.Code != 0 {
		t.Fatalf("keep-alive renewal after the load passed: %+v", resp)
	}
	if n := counterValue(t, ln.metrics.admissionRefusals.WithLabelValues("grant")); n != 2 {
		t.Fatalf("grant refusals counted: %v, want 2", n)
	}
	if n := counterValue(t, ln.metrics.admissionRefusals.WithLabelValues("held")); n != 2 {
		t.Fatalf("renewal refusals counted: %v, want 2", n)
	}
	if h, g := ln.adm.pending[classHeld].Load(), ln.adm.pending[classGrant].Load(); h != 0 || g != 0 {
		t.Fatalf("pending %d renewals, %d grants after every call was answered, want 0", h, g)
	}
}

// TestConcurrentRenewalsOfOneLeaseShareCommands: renewals of one lease
// sent together are all answered, and each either added a command or rode
// on one already waiting: applied renewals + coalesced = calls.
func TestConcurrentRenewalsOfOneLeaseShareCommands(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, ln := tc.leader()
	lc := tc.client(li)
	ctx := ctxT(t)
	held, err := lc.Acquire(ctx, acquireReq("adm/shared", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	applied0 := counterValue(t, ln.metrics.renewals)
	rode0 := counterValue(t, ln.metrics.renewalsCoalesced)
	const calls = 200
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := lc.Renew(ctx, &api.RenewRequest{LeaseId: held.Lease.Id})
			if err == nil && r.Lease.Token != held.Lease.Token {
				err = context.DeadlineExceeded
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	applied := counterValue(t, ln.metrics.renewals) - applied0
	rode := counterValue(t, ln.metrics.renewalsCoalesced) - rode0
	t.Logf("%d renewals: %v commands, %v rode on one", calls, applied, rode)
	if applied+rode != calls {
		t.Fatalf("applied %v + rode %v != %d calls", applied, rode, calls)
	}
	if h, g := ln.adm.pending[classHeld].Load(), ln.adm.pending[classGrant].Load(); h != 0 || g != 0 {
		t.Fatalf("pending %d renewals, %d grants after every call was answered, want 0", h, g)
	}
}

// TestUrgentRenewalsGetThroughAFullQueue: with the renewals' budget spent,
// a renewal of a lease that has less than a third of its ttl left is
// still admitted (on a budget of its own), while one of a lease with time
// to spare is refused with a retry hint. Under 3x overload admission by
// arrival alone let 36 of 100 000 kept-alive leases run out: their
// retries kept meeting a full queue.
func TestUrgentRenewalsGetThroughAFullQueue(t *testing.T) {
	const maxPending = 64
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxPending, c.MaxPendingGrants = maxPending, 8 })
	li, ln := tc.leader()
	lc := tc.client(li)
	ctx := ctxT(t)
	old, err := lc.Acquire(ctx, acquireReq("adm/old", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tc.clocks[li].Step(21 * time.Second) // old: 9 s of 30 left
	fresh, err := lc.Acquire(ctx, acquireReq("adm/fresh", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	ln.adm.pending[classHeld].Add(maxPending) // the renewals' budget is spent
	_, err = lc.Renew(ctx, &api.RenewRequest{LeaseId: fresh.Lease.Id})
	overloadDetails(t, err)
	r, err := lc.Renew(ctx, &api.RenewRequest{LeaseId: old.Lease.Id})
	if err != nil {
		t.Fatalf("a renewal with under a third of its ttl left, the queue full: %v", err)
	}
	if left := r.TtlRemaining.AsDuration(); left < 25*time.Second {
		t.Fatalf("renewed lease has %v left, want about its ttl", left)
	}
	ln.adm.pending[classHeld].Add(-maxPending)

	// While the held budget has room, a running-out lease's renewal takes
	// from it; its own budget is bounded too.
	tc.clocks[li].Step(21 * time.Second) // fresh near its end now
	ln.adm.pending[classUrgent].Add(maxPending)
	if _, err := lc.Renew(ctx, &api.RenewRequest{LeaseId: fresh.Lease.Id}); err != nil {
		t.Fatalf("an urgent renewal with the held budget free: %v", err)
	}
	tc.clocks[li].Step(21 * time.Second)
	ln.adm.pending[classHeld].Add(maxPending)
	_, err = lc.Renew(ctx, &api.RenewRequest{LeaseId: fresh.Lease.Id})
	overloadDetails(t, err)
	ln.adm.pending[classHeld].Add(-maxPending)
	ln.adm.pending[classUrgent].Add(-maxPending)
	for class, want := range map[string]float64{"held": 1, "urgent": 1} {
		if n := counterValue(t, ln.metrics.admissionRefusals.WithLabelValues(class)); n != want {
			t.Fatalf("%s refusals counted: %v, want %v", class, n, want)
		}
	}
	for c := range ln.adm.pending {
		if v := ln.adm.pending[c].Load(); v != 0 {
			t.Fatalf("class %d: %d pending after every call was answered, want 0", c, v)
		}
	}
}
