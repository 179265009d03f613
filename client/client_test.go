package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

const skewMargin = 300 * time.Millisecond // testcluster.Defaults

func newClient(t *testing.T, c *testcluster.Cluster, tweak func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{Endpoints: c.Endpoints()}
	if tweak != nil {
		tweak(&cfg)
	}
	return mustNew(t, cfg)
}

// mustNew returns a client of cfg, closed when the test ends.
func mustNew(tb testing.TB, cfg client.Config) *client.Client {
	tb.Helper()
	c, err := client.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The seeds' scenario: A holds the lease, A's keep-alive stalls, A learns
// of the loss no later than its safe deadline, and B gets a higher token
// only after the cluster's expires_at + skew_margin; in real time A's Done
// comes before B's grant.
func TestStalledHolderLosesLeaseBeforeNextHolderIsGranted(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 60*time.Second)
	a := newClient(t, c, nil)
	b := newClient(t, c, nil)
	la, err := a.Acquire(ctx, "seeds/file", client.WithTTL(3*time.Second), client.WithHolder("A"))
	if err != nil {
		t.Fatal(err)
	}
	// Let a renewal or two go through, then stall A's keep-alive.
	time.Sleep(1200 * time.Millisecond)
	client.StallKeepAlive(a, true)
	safe := la.SafeUntil()
	// With renewals stalled, the lease's expiry in cluster time is final.
	g, err := b.Get(ctx, "seeds/file")
	if err != nil || g.Lease == nil || g.Lease.Token != la.Token() {
		t.Fatalf("get: %+v %v", g, err)
	}
	doneAt := make(chan time.Time, 1)
	go func() { <-la.Done(); doneAt <- time.Now() }()

	lb, err := b.Acquire(ctx, "seeds/file", client.WithTTL(3*time.Second), client.WithHolder("B"), client.WithWait())
	if err != nil {
		t.Fatal(err)
	}
	grantedSeen := time.Now()
	tA := <-doneAt
	if !errors.Is(la.Err(), client.ErrSafeDeadline) {
		t.Fatalf("A ended with %v", la.Err())
	}
	// Done fires at the safe deadline; allow for goroutine scheduling on a
	// loaded 2-core machine. The order that matters is checked below.
	if tA.After(safe.Add(250 * time.Millisecond)) {
		t.Fatalf("A's Done at %v, after its safe deadline %v", tA, safe)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d not above A's %d", lb.Token(), la.Token())
	}
	if tA.After(grantedSeen) {
		t.Fatalf("A's Done (%v) came after B's grant was seen (%v)", tA, grantedSeen)
	}
	gb, err := b.Get(ctx, "seeds/file")
	if err != nil || gb.Lease == nil {
		t.Fatal(err)
	}
	t.Logf("A done %v before B's grant was seen", grantedSeen.Sub(tA))
}

func TestLeaseSurvivesLeaderKillDuringKeepAlive(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 60*time.Second)
	cl := newClient(t, c, nil)
	l, err := cl.Acquire(ctx, "survivor", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(c.Leader(), syscall.SIGKILL)
	c.Leader()
	// Two full ttls later the lease is still held, by the same token.
	select {
	case <-l.Done():
		t.Fatalf("lease lost across failover: %v", l.Err())
	case <-time.After(10 * time.Second):
	}
	g, err := cl.Get(ctx, "survivor")
	if err != nil || g.Lease == nil || g.Lease.ID != l.ID() || g.Lease.Token != l.Token() {
		t.Fatalf("after failover: %+v %v", g, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("after release: %v", l.Err())
	}
}

func TestWaitersAreServedInArrivalOrderAndCancelledOnesSkipped(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 60*time.Second)
	cl := newClient(t, c, nil)
	first, err := cl.Acquire(ctx, "fair", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who int
		l   *client.Lease
		err error
	}
	const n = 4
	results := make(chan result, n)
	cctx, cancelOne := context.WithCancel(ctx)
	for i := 0; i < n; i++ {
		wctx := ctx
		if i == 2 {
			wctx = cctx
		}
		go func(i int, wctx context.Context) {
			l, err := cl.Acquire(wctx, "fair", client.WithTTL(30*time.Second), client.WithWait(), client.WithHolder(string(rune('a'+i))))
			results <- result{i, l, err}
		}(i, wctx)
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, err := cl.Get(ctx, "fair")
			if err == nil && g.Waiters == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancelOne()
	if r := <-results; r.who != 2 || r.err == nil {
		t.Fatalf("cancelled waiter: %+v", r)
	}
	prev := first
	for _, want := range []int{0, 1, 3} {
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-results
		if r.who != want || r.err != nil {
			t.Fatalf("want waiter %d next, got %d (%v)", want, r.who, r.err)
		}
		if r.l.Token() <= prev.Token() {
			t.Fatalf("token %d not above %d", r.l.Token(), prev.Token())
		}
		prev = r.l
	}
}

func TestWatchAcrossLeaderChangeMissesAndRepeatsNothing(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 60*time.Second)
	watcher := newClient(t, c, nil)
	actor := newClient(t, c, nil)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	events := watcher.Watch(wctx, "wl/", client.WithPrefix())
	type change struct {
		typ   client.EventType
		token uint64
	}
	var want []change
	act := func(round int) {
		l, err := actor.Acquire(ctx, "wl/r", client.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		want = append(want, change{client.EventGranted, l.Token()})
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		want = append(want, change{client.EventReleased, l.Token()})
	}
	for i := 0; i < 5; i++ {
		act(i)
	}
	c.Kill(c.Leader(), syscall.SIGKILL)
	for i := 5; i < 10; i++ {
		act(i)
	}
	var got []change
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case ev, ok := <-events:
			if !ok || ev.Err != nil {
				t.Fatalf("watch ended: %v", ev.Err)
			}
			if ev.Type == client.EventRenewed {
				continue
			}
			got = append(got, change{ev.Type, ev.Token})
		case <-timeout:
			t.Fatalf("got %d of %d events: %v", len(got), len(want), got)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: got %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
	select {
	case ev := <-events:
		if ev.Type != client.EventRenewed {
			t.Fatalf("extra event %+v", ev)
		}
	case <-time.After(500 * time.Millisecond):
	}
}

// dropFirstAcquireResponse lets the first Acquire reach the cluster, then
// throws its response away and reports Unavailable, as a lost packet would.
func dropFirstAcquireResponse(dropped *atomic.Int32) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/leasefence.v1.LeaseService/Acquire" && dropped.Add(1) == 1 {
			return status.Error(codes.Unavailable, "injected: response lost")
		}
		return err
	}
}

func TestRetriedAcquireAfterLostResponseYieldsOneLease(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 30*time.Second)
	var dropped atomic.Int32
	cl := newClient(t, c, func(cfg *client.Config) {
		cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(dropFirstAcquireResponse(&dropped))}
	})
	l, err := cl.Acquire(ctx, "once", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Load() < 2 {
		t.Fatalf("the lost response was not retried (%d calls)", dropped.Load())
	}
	g, err := cl.Get(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if g.ScopeToken != 1 || g.Lease == nil || g.Lease.ID != l.ID() || l.Token() != 1 {
		t.Fatalf("two leases from one acquire: scope token %d, lease %+v, ours %v", g.ScopeToken, g.Lease, l.ID())
	}
}

func TestAcquireRefusalsMapToTypedErrors(t *testing.T) {
	c := startCluster(t)
	ctx := ctxFor(t, 30*time.Second)
	cl := newClient(t, c, nil)
	l, err := cl.Acquire(ctx, "typed", client.WithHolder("first"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Acquire(ctx, "typed")
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) || held.Holder != "first" || held.Token != l.Token() {
		t.Fatalf("held: %v", err)
	}
	_, err = cl.Acquire(ctx, "", client.WithTTL(time.Hour))
	var inv *client.InvalidError
	if !errors.As(err, &inv) || inv.Field != "resource" {
		t.Fatalf("invalid: %v", err)
	}
}
