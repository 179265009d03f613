package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/loopback"
)

// blackHole is a silent peer's address (loopback.Silent), closed with t.
func blackHole(t *testing.T) string {
	t.Helper()
	addr, stop, err := loopback.Silent()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// indeterminate returns the request id of an Unavailable INDETERMINATE
// status, and whether err is one.
func indeterminate(err error) (string, bool) {
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return "", false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Reason == api.ReasonIndeterminate && ei.Domain == api.ErrorDomain {
			return ei.Metadata[api.MetaRequestID], true
		}
	}
	return "", false
}

// A follower whose calls to the leader go unanswered while raft still
// regards that leader as alive (its heartbeats arrive; the follower's own
// connection to it is a black hole) gives up on each hop after hopTimeout.
// A call it may not send again answers INDETERMINATE about then; one it
// may resend is resent until the caller's deadline nears, then answers
// INDETERMINATE with its request id before that deadline.
func TestForwardingHopToUnansweringLeaderEndsIndeterminateBeforeTheDeadline(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, ln := tc.leader()
	fi, _ := tc.follower()
	lease, err := tc.client(li).Acquire(ctxT(t), &api.AcquireRequest{Resource: "hop/release", Holder: "t", Ttl: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(fi)
	tc.cfgs[fi].Unsafe.PeerRoutes = map[string]string{ln.Addr(): blackHole(t)}
	tc.start(fi)
	fc := tc.client(fi)
	eventually(t, 10*time.Second, "the restarted follower to know the leader", func() bool {
		_, addr := tc.nodes[fi].Leader()
		return addr == ln.Addr()
	})
	hop := tc.nodes[fi].hopTimeout()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = fc.Release(ctx, &api.ReleaseRequest{LeaseId: lease.Lease.Id})
	if _, ok := indeterminate(err); !ok {
		t.Fatalf("release through the follower: %v; want Unavailable INDETERMINATE", err)
	}
	// Ended by the hop timeout (hop), not by the caller's 10 s deadline
	// (which would say errAnswerBy): no timing needed to tell them apart.
	if msg := status.Convert(err).Message(); !strings.Contains(msg, errHopSilent.Error()) {
		t.Fatalf("release ended by %q; want the hop timeout (%v): %q", msg, hop, errHopSilent)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 2*hop+hop/2)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err = fc.Acquire(ctx, &api.AcquireRequest{Resource: "hop/acquire", Holder: "t", Ttl: durationpb.New(5 * time.Second), RequestId: "hop-req-1"})
	if id, ok := indeterminate(err); !ok || id != "hop-req-1" {
		t.Fatalf("acquire through the follower: %v; want Unavailable INDETERMINATE naming hop-req-1", err)
	}
	if time.Now().After(deadline) {
		t.Fatal("the answer came after the caller's deadline")
	}
	var m dto.Metric
	if err := tc.nodes[fi].metrics.forwardCut.Write(&m); err != nil {
		t.Fatal(err)
	}
	if cut := m.GetCounter().GetValue(); cut < 3 {
		t.Fatalf("forward_hops_cut_total = %v; want at least 3 (one release, two acquire hops)", cut)
	}
}

// An indeterminate outcome is said once, with the request id to retry
// with, whether or not the wrapped error already says it; the status
// carries the id for the client.
func TestIndeterminateErrorNamesOutcomeOnceAndItsRequestID(t *testing.T) {
	for _, inner := range []error{
		fmt.Errorf("%w: leadership lost while committing log", ErrIndeterminate),
		errHopSilent,
	} {
		err := &IndeterminateError{RequestID: "r-1", Err: inner}
		if msg := err.Error(); strings.Count(msg, "outcome unknown") != 1 || !strings.Contains(msg, `"r-1"`) {
			t.Errorf("%q: want \"outcome unknown\" once and the request id", msg)
		}
		if !errors.Is(err, ErrIndeterminate) || !errors.Is(err, inner) {
			t.Errorf("%v does not unwrap to ErrIndeterminate and %v", err, inner)
		}
		if id, ok := indeterminate(toStatus(err)); !ok || id != "r-1" {
			t.Errorf("toStatus(%v) = %v; want Unavailable INDETERMINATE naming r-1", err, toStatus(err))
		}
	}
}

// Calls a follower forwards to the leader travel on its Calls stream
// (transport.CallConn), and are answered there as directly: every one
// succeeds, with its own token. A waiting Acquire, which may stay on the
// leader for long, goes as a call of its own.
func TestFollowerForwardsCallsOnOneStream(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.leader()
	fi, fn := tc.follower()
	c := tc.client(fi)
	const workers, rounds = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var last uint64
			for r := range rounds {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				res, err := c.Acquire(ctx, &api.AcquireRequest{Resource: fmt.Sprintf("fwd/%d", w), Holder: "h", Ttl: durationpb.New(10 * time.Second)})
				if err == nil && res.Lease.Token <= last {
					err = fmt.Errorf("round %d: token %d after %d", r, res.Lease.Token, last)
				}
				if err == nil {
					last = res.Lease.Token
					_, err = c.Release(ctx, &api.ReleaseRequest{LeaseId: res.Lease.Id})
				}
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls, messages := fn.fwd.batchStats()
	t.Logf("%d calls forwarded in %d messages", calls, messages)
	if calls != 2*workers*rounds {
		t.Fatalf("%d calls went on the Calls stream; want the %d forwarded", calls, 2*workers*rounds)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, &api.AcquireRequest{Resource: "fwd/wait", Holder: "h", Ttl: durationpb.New(10 * time.Second), Wait: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := fn.fwd.batchStats(); after != calls {
		t.Errorf("a waiting Acquire went on the Calls stream (%d calls, was %d); it must go alone", after, calls)
	}
}
