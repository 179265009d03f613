package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// scripted answers Acquire, Renew and Release as the test says (Release
// with success when it says nothing): a node whose answers a real cluster gives only under
// faults (or never), to pin down what the client makes of each.
type scripted struct {
	api.UnimplementedLeaseServiceServer
	acquire func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error)
	renew   func(context.Context, *api.RenewRequest) (*api.RenewResponse, error)
	release func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) // nil: released
}

func (s *scripted) Acquire(ctx context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
	return s.acquire(ctx, r)
}

func (s *scripted) Renew(ctx context.Context, r *api.RenewRequest) (*api.RenewResponse, error) {
	return s.renew(ctx, r)
}

func (s *scripted) Release(ctx context.Context, r *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	if s.release != nil {
		return s.release(ctx, r)
	}
	return &api.ReleaseResponse{Released: true}, nil
}

func scriptedClient(t *testing.T, s *scripted) *client.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterLeaseServiceServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	c, err := client.New(client.Config{Endpoints: []string{ln.Addr().String()}, RequestTimeout: 2 * time.Second, RetryFor: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// replayedLate makes g a replay answered late: its window (300 ms) is
// spent on arrival (400 ms).
func replayedLate(g *api.AcquireResponse) {
	time.Sleep(400 * time.Millisecond)
	g.Replayed, g.TtlRemaining = true, durationpb.New(300*time.Millisecond)
}

// renewed5s answers a renewal with 5 s left.
func renewed5s(context.Context, *api.RenewRequest) (*api.RenewResponse, error) {
	return &api.RenewResponse{TtlRemaining: durationpb.New(5 * time.Second)}, nil
}

func grant(r *api.AcquireRequest) *api.AcquireResponse {
	return &api.AcquireResponse{
		Lease: &api.Lease{Id: make([]byte, 16), Resource: r.Resource, Scope: r.Resource, Holder: r.Holder, Token: 7,
			Ttl: r.Ttl},
		TtlRemaining: r.Ttl,
	}
}

// An Acquire whose outcome is unknown fails with ErrIndeterminate and its
// request id, however the attempt ended: the caller cancelling while it
// was at the node (a waiting Acquire is stopped so, and the grant may land
// at that moment), or the node answering Internal or Unknown (a node that
// failed applying the committed entry, a handler that panicked). They
// came back as bare statuses, which say neither.
func TestAcquireWithAnUnknownOutcomeIsIndeterminate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(context.Context) error
		cancel bool
	}{
		{"canceled by the caller", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true},
		{"internal", func(context.Context) error {
			return status.Error(codes.Internal, "cluster: node failed: log entry 9: corrupt")
		}, false},
		{"unknown", func(context.Context) error { return status.Error(codes.Unknown, "panic in handler") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedClient(t, &scripted{acquire: func(ctx context.Context, _ *api.AcquireRequest) (*api.AcquireResponse, error) {
				return nil, tc.answer(ctx)
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.cancel {
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			_, err := c.Acquire(ctx, "r", client.WithWait(), client.WithRequestID("req-1"))
			var ie *client.IndeterminateError
			if !errors.As(err, &ie) || ie.RequestID != "req-1" {
				t.Fatalf("got %v, want an *IndeterminateError with request id req-1", err)
			}
			if tc.cancel && !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want it to say the caller canceled", err)
			}
		})
	}
}

// Failures that ran nothing stay definite: gRPC refusing to send a
// request it cannot marshal (Internal "grpc: ..."), and a caller whose
// context had ended before the attempt.
func TestAcquireThatRanNothingIsNotIndeterminate(t *testing.T) {
	c := scriptedClient(t, &scripted{acquire: func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
		t.Error("the server was called")
		return nil, status.Error(codes.Internal, "unreachable")
	}})
	_, err := c.Acquire(context.Background(), "bad\xffname", client.WithRequestID("req-4"))
	if err == nil || errors.Is(err, client.ErrIndeterminate) {
		t.Fatalf("a request gRPC could not marshal: %v; want a definite error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Acquire(ctx, "r", client.WithRequestID("req-5"))
	if err == nil || errors.Is(err, client.ErrIndeterminate) || status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller canceled before the call: %v; want a definite cancel", err)
	}
}

// An OK answer without a lease (no node sends one, but the network is
// not trusted) is an error, not a panic; the request id may be retried.
func TestAcquireAnswerWithoutALeaseIsAnError(t *testing.T) {
	for _, resp := range []*api.AcquireResponse{
		{TtlRemaining: durationpb.New(5 * time.Second)},
		{Lease: &api.Lease{Id: []byte{1, 2}, Ttl: durationpb.New(5 * time.Second)}, TtlRemaining: durationpb.New(5 * time.Second)},
	} {
		c := scriptedClient(t, &scripted{acquire: func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
			return resp, nil
		}})
		l, err := c.Acquire(context.Background(), "r", client.WithRequestID("req-2"))
		var ie *client.IndeterminateError
		if l != nil || !errors.As(err, &ie) || ie.RequestID != "req-2" {
			t.Fatalf("answer %v: got %v, %v; want no lease and an *IndeterminateError with its request id", resp, l, err)
		}
	}
}

// A waiting Acquire whose grant ends before its confirming renewal (the
// answer, or the renewal, was slower than the ttl) fails with
// ErrLeaseLost, as an ended grant does everywhere else: Campaign then
// tries again under a new id instead of giving up with ErrNotFound. When
// the renewal goes unanswered the grant may still stand, but Acquire will
// not hand it out either: ErrLeaseLost, not ErrUnavailable's "nothing was
// done".
func TestWaitingAcquireWhoseConfirmingRenewalFailsIsLeaseLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		renew error
	}{
		{"ended", status.Error(codes.NotFound, "fsm: lease not found or expired")},
		{"unanswered", status.Error(codes.Unavailable, "connection reset")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedClient(t, &scripted{
				acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) { return grant(r), nil },
				renew:   func(context.Context, *api.RenewRequest) (*api.RenewResponse, error) { return nil, tc.renew },
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := c.Acquire(ctx, "r", client.WithWait(), client.WithTTL(5*time.Second))
			if l != nil || !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("got %v, %v; want no lease and ErrLeaseLost", l, err)
			}
			if errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrNotFound) {
				t.Fatalf("got %v: it must not say nothing was done, nor that the call's lease was unknown", err)
			}
		})
	}
}

// A request id names one request: Acquire called again with the id of a
// lease this client still holds replays that grant, and gets the same
// *Lease, not a second one for the same lease id (which the keep-alive
// kept renewing after both had ended: the schedule held the first).
func TestAcquireAgainWithAHeldLeasesRequestIDReturnsThatLease(t *testing.T) {
	c := scriptedClient(t, &scripted{
		acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) { return grant(r), nil },
		renew:   renewed5s,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l1, err := c.Acquire(ctx, "r", client.WithRequestID("req-3"), client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "r", client.WithRequestID("req-3"), client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l1 != l2 {
		t.Fatalf("two *Lease for one lease id (%v)", l1.ID())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		byID, due := client.KeptLeases(c)
		if byID == 0 && due == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("after the release the keep-alive still holds %d by id, %d scheduled", byID, due)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Release whose attempt may have reached the leader and that then finds
// no leader until it gives up has an unknown outcome: ErrIndeterminate
// (Release is idempotent, so sending it again is the retry). It came back
// as ErrNoLeader, whose doc says nothing was done. A Release every node
// refused before anything could be sent stays ErrNoLeader.
func TestReleaseThatMayHaveArrivedIsIndeterminate(t *testing.T) {
	noLeader := func() error {
		st, err := status.New(codes.Unavailable, "cluster: not the leader, leader unknown").WithDetails(&api.NotLeader{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	for _, tc := range []struct {
		name   string
		silent bool // the first attempt gets no answer
		want   error
	}{
		{"first attempt unanswered", true, client.ErrIndeterminate},
		{"refused throughout", false, client.ErrNoLeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			c := scriptedClient(t, &scripted{
				acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) { return grant(r), nil },
				renew:   renewed5s,
				release: func(ctx context.Context, _ *api.ReleaseRequest) (*api.ReleaseResponse, error) {
					calls++ // the call loop never runs two attempts at once
					if tc.silent && calls == 1 {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return nil, noLeader()
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := c.Acquire(ctx, "r", client.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			err = l.Release(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want == client.ErrIndeterminate && (errors.Is(err, client.ErrNoLeader) || errors.Is(err, client.ErrUnavailable)) {
				t.Fatalf("got %v: it must not also say that nothing was done", err)
			}
			if tc.want == client.ErrNoLeader && errors.Is(err, client.ErrIndeterminate) {
				t.Fatalf("got %v: nothing was sent, the outcome is known", err)
			}
		})
	}
}

// Acquire again under the request id of a lease this client keeps alive,
// when the replay's answer comes after its own safe window closed: Acquire
// abandoned the replayed grant and released its lease id, freeing the
// resource under the kept *Lease, which stayed live (reviewer). The kept
// lease is the answer; nothing is released.
func TestAReplayOfAKeptLeaseNeverReleasesIt(t *testing.T) {
	var (
		mu       sync.Mutex
		calls    int
		released []error // the kept lease's Err when a release arrived
		kept     *client.Lease
	)
	c := scriptedClient(t, &scripted{
		acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
			mu.Lock()
			calls++
			replay := calls > 1
			mu.Unlock()
			g := grant(r)
			if replay {
				replayedLate(g)
			}
			return g, nil
		},
		renew: renewed5s,
		release: func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			released = append(released, kept.Err())
			return &api.ReleaseResponse{Released: true}, nil
		},
	})
	ctx := context.Background()
	l, err := c.Acquire(ctx, "r", client.WithTTL(5*time.Second), client.WithRequestID("req-6"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	kept = l
	mu.Unlock()
	again, err := c.Acquire(ctx, "r", client.WithTTL(5*time.Second), client.WithRequestID("req-6"))
	mu.Lock()
	defer mu.Unlock()
	for _, e := range released {
		if e == nil {
			t.Fatalf("the lease id was released while its *Lease was live (safe for %v more)", time.Until(l.SafeUntil()))
		}
	}
	if err != nil || again != l {
		t.Fatalf("the replay of a kept lease: %v, %v; want the kept lease", again, err)
	}
}

// A call whose attempt went unanswered and whose caller gave up while the
// client looked for another node (before the next attempt was sent) may
// have taken effect: ErrIndeterminate (with its request id for an
// Acquire), not gRPC's bare Canceled (reviewer).
func TestACallCanceledAfterASilentAttemptIsIndeterminate(t *testing.T) {
	for _, op := range []string{"release", "acquire"} {
		t.Run(op, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var armed, silenced atomic.Bool
			s := &scripted{
				acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) { return grant(r), nil },
				renew:   renewed5s,
			}
			// The client probes the nodes' Status after a silent attempt:
			// the caller cancels then.
			probe := &cancelOnStatus{cancel: func() {
				if armed.Load() {
					cancel()
				}
			}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			api.RegisterLeaseServiceServer(srv, s)
			api.RegisterClusterServiceServer(srv, probe)
			go srv.Serve(ln)
			t.Cleanup(srv.Stop)
			// The first armed call reaches the node, and its answer never
			// comes back: a node frozen right after it proposed.
			silence := grpc.WithUnaryInterceptor(func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if armed.Load() && (method == api.LeaseService_Release_FullMethodName || method == api.LeaseService_Acquire_FullMethodName) && silenced.CompareAndSwap(false, true) {
					go invoker(context.WithoutCancel(ictx), method, req, reply, cc, opts...)
					<-ictx.Done()
					return status.FromContextError(ictx.Err()).Err()
				}
				return invoker(ictx, method, req, reply, cc, opts...)
			})
			c, err := client.New(client.Config{Endpoints: []string{ln.Addr().String()}, RequestTimeout: 300 * time.Millisecond,
				RetryFor: 5 * time.Second, DialOptions: []grpc.DialOption{silence}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if op == "release" {
				l, err := c.Acquire(context.Background(), "r", client.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				armed.Store(true)
				err = l.Release(ctx)
				if !errors.Is(err, client.ErrIndeterminate) {
					t.Fatalf("got %v (%T), want ErrIndeterminate: the first attempt may have arrived", err, err)
				}
				return
			}
			armed.Store(true)
			_, err = c.Acquire(ctx, "r2", client.WithTTL(5*time.Second), client.WithRequestID("req-7"))
			var ie *client.IndeterminateError
			if !errors.As(err, &ie) || ie.RequestID != "req-7" {
				t.Fatalf("got %v (%T), want an *IndeterminateError with request id req-7", err, err)
			}
		})
	}
}

// cancelOnStatus answers Status, calling cancel first.
type cancelOnStatus struct {
	api.UnimplementedClusterServiceServer
	cancel func()
}

func (s *cancelOnStatus) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	s.cancel()
	return &api.StatusResponse{State: "follower"}, nil
}

// Two Acquires of one request id in one client: B's replay answered late
// is abandoned, and A's answer for the same grant arrives after B looked
// whether the lease is kept but before B's release went out. A must not
// hand out a lease B is releasing (reviewer: abandon's check and release
// were not one step against add).
func TestAnAbandonedGrantIsNeverHandedOutByAConcurrentAcquire(t *testing.T) {
	var (
		mu        sync.Mutex
		calls     int
		aArrived  = make(chan struct{})
		answerA   = make(chan struct{})
		aReturned = make(chan *client.Lease, 1)
		released  = make(chan error, 1) // A's lease's Err when B's release arrived (nil: live)
		first     atomic.Bool           // B's release arrived
	)
	c := scriptedClient(t, &scripted{
		acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			g := grant(r)
			if first { // A: granted, answered once B's release is under way
				close(aArrived)
				<-answerA
				return g, nil
			}
			replayedLate(g) // B
			return g, nil
		},
		renew: renewed5s,
		release: func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) {
			if !first.CompareAndSwap(false, true) {
				return &api.ReleaseResponse{Released: true}, nil // Close's, of a lease A kept
			}
			close(answerA)
			select {
			case l := <-aReturned:
				if l != nil {
					released <- l.Err()
				} else {
					released <- errors.New("A got no lease")
				}
			case <-time.After(3 * time.Second):
				released <- errors.New("A did not return")
			}
			return &api.ReleaseResponse{Released: true}, nil
		},
	})
	ctx := context.Background()
	var errA error
	go func() {
		l, err := c.Acquire(ctx, "r", client.WithTTL(5*time.Second), client.WithRequestID("req-race"))
		errA = err
		aReturned <- l
	}()
	<-aArrived
	_, errB := c.Acquire(ctx, "r", client.WithTTL(5*time.Second), client.WithRequestID("req-race"))
	if !errors.Is(errB, client.ErrSafeDeadline) {
		t.Fatalf("B: %v, want ErrSafeDeadline", errB)
	}
	select {
	case e := <-released:
		if e == nil {
			t.Fatal("B released the lease id while A had handed it out, live")
		}
		if errA != nil && !errors.Is(errA, client.ErrLeaseLost) {
			t.Fatalf("A: %v, want ErrLeaseLost", errA)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no release arrived")
	}
}

// A client closed while a call retried after an attempt that may have
// taken effect (a node that proposed and lost its leadership): the call is
// indeterminate, not a bare ErrClosed that reads as "nothing was done".
func TestACallCutByCloseAfterAnAttemptThatMayHaveArrivedIsIndeterminate(t *testing.T) {
	var calls atomic.Int64
	st, err := status.New(codes.Unavailable, "cluster: leadership lost after the proposal").
		WithDetails(&errdetails.ErrorInfo{Domain: api.ErrorDomain, Reason: api.ReasonIndeterminate})
	if err != nil {
		t.Fatal(err)
	}
	c := scriptedClient(t, &scripted{
		acquire: func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
			calls.Add(1)
			return nil, st.Err()
		},
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "r", client.WithTTL(5*time.Second), client.WithRequestID("req-close"))
		done <- err
	}()
	// The client retries with a backoff (20 ms, doubling): close it
	// while it waits.
	for calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	c.Close()
	select {
	case err := <-done:
		var ie *client.IndeterminateError
		if !errors.As(err, &ie) || ie.RequestID != "req-close" {
			t.Fatalf("got %v (%T), want an *IndeterminateError with request id req-close", err, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}

// wrongLeaseKeepAlive answers every keep-alive renewal under its seq, but
// naming another lease: a broken node or relay.
type wrongLeaseKeepAlive struct{ *scripted }

func (s wrongLeaseKeepAlive) KeepAlive(stream api.LeaseService_KeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, r := range append([]*api.KeepAliveRequest{req}, req.More...) {
			other := bytes.Repeat([]byte{0xff}, len(r.LeaseId))
			if err := stream.Send(&api.KeepAliveResponse{Seq: r.Seq, LeaseId: other, TtlRemaining: durationpb.New(1500 * time.Millisecond)}); err != nil {
				return err
			}
		}
	}
}

// An answer to a renewal's seq that names another lease confirms nothing:
// the lease ends at its safe deadline (the network is not trusted; the
// client took any answer under the seq as the renewal's).
func TestAKeepAliveAnswerNamingAnotherLeaseConfirmsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterLeaseServiceServer(srv, wrongLeaseKeepAlive{&scripted{
		acquire: func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) { return grant(r), nil },
	}})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	c, err := client.New(client.Config{Endpoints: []string{ln.Addr().String()}, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Acquire(context.Background(), "r", client.WithTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), client.ErrSafeDeadline) {
			t.Fatalf("the lease ended with %v, want ErrSafeDeadline", l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the lease lived 5 s on answers naming another lease (ttl 1.5 s); %+v", c.Stats())
	}
}
