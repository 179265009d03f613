package cluster

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

// reqRetry is the first request of the tests below, under request id R.
func reqRetry() *api.AcquireRequest {
	return &api.AcquireRequest{Resource: "jobs/c1", Holder: "tester", Ttl: durationpb.New(5 * time.Second), RequestId: "R"}
}

// wantReused checks err is InvalidArgument with a request_id BadField.
func wantReused(t *testing.T, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	for _, d := range st.Details() {
		if b, ok := d.(*api.BadField); ok && b.Field == "request_id" {
			return
		}
	}
	t.Fatalf("no request_id BadField in %v", st.Details())
}

// Issue 13 §2 through a real cluster over gRPC, sent to a follower (so
// forwarded): a request id reused with any other parameter is refused with
// InvalidArgument and changes nothing; a replay of a grant that has been
// released is answered NotFound with reason LEASE_ENDED, not as a lease.
func TestRequestIDNamesOneRequestAndAnEndedReplaySaysSo(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	fi, _ := tc.follower()
	c := tc.client(fi)
	ctx := ctxT(t)
	first, err := c.Acquire(ctx, reqRetry())
	if err != nil {
		t.Fatal(err)
	}
	changes := []struct {
		name   string
		change func(r *api.AcquireRequest)
	}{
		{"resource", func(r *api.AcquireRequest) { r.Resource = "jobs/c2" }},
		{"scope", func(r *api.AcquireRequest) { r.Scope = "dk" }},
		{"holder", func(r *api.AcquireRequest) { r.Holder = "other" }},
		{"ttl", func(r *api.AcquireRequest) { r.Ttl = durationpb.New(6 * time.Second) }},
		{"wait", func(r *api.AcquireRequest) { r.Wait = true }},
	}
	for _, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			req := reqRetry()
			ch.change(req)
			resp, err := c.Acquire(ctx, req)
			if err == nil {
				t.Fatalf("request id reused with another %s was answered %v", ch.name, resp)
			}
			wantReused(t, err)
		})
	}
	for _, r := range []string{"dk", "jobs/c2"} {
		if g, err := c.Get(ctx, &api.GetRequest{Resource: r}); err != nil || g.ScopeToken != 0 || g.Lease != nil {
			t.Fatalf("a refused reuse changed %s: %v %v", r, g, err)
		}
	}
	if g, err := c.Get(ctx, &api.GetRequest{Resource: "jobs/c1"}); err != nil || !proto.Equal(g.Lease, first.Lease) || g.ScopeToken != 1 {
		t.Fatalf("a refused reuse changed jobs/c1: %v %v", g, err)
	}
	// The same request again: replayed.
	if r, err := c.Acquire(ctx, reqRetry()); err != nil || !r.Replayed || r.Lease.Token != first.Lease.Token {
		t.Fatalf("retry: %v %v", r, err)
	}
	if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: first.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Acquire(ctx, reqRetry())
	if err == nil {
		t.Fatalf("replay of a released grant answered as a lease: %v", resp)
	}
	st, _ := status.FromError(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if e, ok := d.(*errdetails.ErrorInfo); ok {
			info = e
		}
	}
	if st.Code() != codes.NotFound || info == nil || info.Reason != api.ReasonLeaseEnded || info.Metadata["request_id"] != "R" {
		t.Fatalf("replay of a released grant: want NotFound with reason LEASE_ENDED, got %v (%v)", err, st.Details())
	}
}

// A grant's request id outlives the retries of one client even when the
// max ttl is short: a client retries one request id for RetryFor (15 s by
// default), so a grant forgotten max ttl + skew margin after it was made
// (2.1 s here) let a late retry take a second token for one request — the
// harness's drift-edge runs (max ttl 2 s) found it as request-id-identity.
// Grants are now kept at least --refusal-keep, the window that already
// covers a client's retries.
func TestGrantRequestIDOutlivesAShortMaxTTL(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.MinTTL, c.MaxTTL, c.SkewMargin = 300*time.Millisecond, time.Second, 100*time.Millisecond
		c.Drift = 1e-4
	})
	li, _ := tc.leader()
	c := tc.client(li)
	ctx := ctxT(t)
	req := &api.AcquireRequest{Resource: "jobs/short", Holder: "tester", Ttl: durationpb.New(500 * time.Millisecond), RequestId: "S"}
	first, err := c.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Past max ttl + skew margin and a few ticks: the lease is gone and a
	// grant kept only that long is forgotten.
	time.Sleep(3 * time.Second)
	resp, err := c.Acquire(ctx, req)
	if err == nil {
		t.Fatalf("a retry 3 s after the grant (token %d) was granted again: token %d, replayed %v", first.Lease.Token, resp.Lease.Token, resp.Replayed)
	}
	st, _ := status.FromError(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if e, ok := d.(*errdetails.ErrorInfo); ok {
			info = e
		}
	}
	if st.Code() != codes.NotFound || info == nil || info.Reason != api.ReasonLeaseEnded {
		t.Fatalf("late retry of an ended grant: want NotFound with reason LEASE_ENDED, got %v (%v)", err, st.Details())
	}
}

// A waiting Acquire under a request id first refused without wait is
// another request: refused at once, not proposed again every millisecond
// until its deadline (issue 13 §5). Counted in entries applied.
func TestWaitingRetryOfARefusedRequestIDDoesNotSpin(t *testing.T) {
	err, spent := waitingRetryOfARefusedRequestID(t, nil)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("waiting retry of a refused request id: want InvalidArgument, got %v", err)
	}
	// Ticks (every 200 ms here) and the one proposal: a handful at most.
	if spent > 10 {
		t.Errorf("the waiting retry applied %d entries in its window", spent)
	}
}

// waitingRetryOfARefusedRequestID acquires x, is refused under request id
// "polled" without wait, releases x, then retries "polled" with wait for at
// most 1 s on the leader: the retry's error and the entries the leader
// applied meanwhile. tweak (nil: none) changes every node's Config.
func waitingRetryOfARefusedRequestID(t *testing.T, tweak func(*Config)) (error, uint64) {
	t.Helper()
	tc := newTestCluster(t, 3, tweak)
	li, leader := tc.leader()
	c := tc.client(li)
	ctx := ctxT(t)
	hold, err := c.Acquire(ctx, acquireReq("x", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := acquireReq("x", 5*time.Second)
	req.RequestId = "polled"
	if _, err := c.Acquire(ctx, req); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("first attempt: %v", err)
	}
	if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: hold.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	req.Wait = true
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := leader.AppliedIndex()
	_, err = c.Acquire(wctx, req)
	return err, leader.AppliedIndex() - before
}

// Refused request ids are capped at MaxRefusals, the oldest forgotten
// first; the metrics say how many are remembered and how many were
// forgotten early. Every node counts the same (the cap is in the entry).
func TestRefusedRequestIDsAreCappedAndCounted(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxRefusals = 2; c.MetricsListen = "127.0.0.1:0" })
	li, leader := tc.leader()
	c := tc.client(li)
	ctx := ctxT(t)
	if _, err := c.Acquire(ctx, acquireReq("hot", 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2", "p3", "p4", "p5"} {
		req := acquireReq("hot", 5*time.Second)
		req.RequestId = id
		if _, err := c.Acquire(ctx, req); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("poll %s: %v", id, err)
		}
	}
	metrics := func() string {
		resp, err := testHTTP.Get("http://" + leader.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	body := metrics()
	for _, want := range []string{`leasefence_dedup_entries{kind="refusal"} 2`, `leasefence_dedup_entries{kind="grant"} 0`, "leasefence_dedup_refusals_evicted_total 3"} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
}

func TestConfigRefusesAShortRefusalKeepOrNoCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "n1", t.TempDir(), map[string]string{"n1": "127.0.0.1:7001"}
	cfg.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg.RefusalKeep = time.Second
	cfg.MaxRefusals = -1
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "refusal keep") || !strings.Contains(err.Error(), "max refusals") {
		t.Fatalf("want both refused, got %v", err)
	}
}
