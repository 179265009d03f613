package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// TestKeepAliveMessageRenewsManyAndAnswersThemTogether: one keep-alive
// message carrying renewals in more (on the leader, and relayed by a
// follower) is answered as if each had come alone, in one response: live
// leases renewed with their token, an unknown lease NotFound, a malformed
// id InvalidArgument, and the same lease twice renewed twice; a brief
// message is answered without the leases.
func TestKeepAliveMessageRenewsManyAndAnswersThemTogether(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	fi, _ := tc.follower()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids [][]byte
	tokens := map[string]uint64{}
	for _, name := range []string{"ka/a", "ka/b", "ka/c"} {
		r, err := tc.client(li).Acquire(ctx, acquireReq(name, 20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Lease.Id)
		tokens[string(r.Lease.Id)] = r.Lease.Token
	}
	unknown := make([]byte, 16)
	unknown[0] = 0xee
	for _, on := range []int{li, fi} {
		ka, err := tc.client(on).KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &api.KeepAliveRequest{LeaseId: ids[0], Seq: 1, More: []*api.KeepAliveRequest{
			{LeaseId: ids[1], Seq: 2}, {LeaseId: unknown, Seq: 3}, {LeaseId: []byte("short"), Seq: 4},
			{LeaseId: ids[2], Seq: 5}, {LeaseId: ids[2], Seq: 6},
		}}
		if err := ka.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := ka.Recv()
		if err != nil {
			t.Fatalf("node %d: %v", on, err)
		}
		got := map[uint64]*api.KeepAliveResponse{resp.Seq: resp}
		for _, m := range resp.More {
			if len(m.More) > 0 {
				t.Fatalf("node %d: an answer in more carries more", on)
			}
			got[m.Seq] = m
		}
		if len(got) != 6 {
			t.Fatalf("node %d: %d answers in one response, want 6: %v", on, len(got), resp)
		}
		for _, seq := range []uint64{1, 2, 5, 6} {
			a := got[seq]
			if a.Code != 0 || a.Lease.GetToken() != tokens[string(a.LeaseId)] || a.TtlRemaining.AsDuration() <= 0 {
				t.Fatalf("node %d: renewal %d: %v", on, seq, a)
			}
		}
		if c := codes.Code(got[3].Code); c != codes.NotFound {
			t.Fatalf("node %d: unknown lease answered %v (%s), want NotFound", on, c, got[3].Message)
		}
		if c := codes.Code(got[4].Code); c != codes.InvalidArgument {
			t.Fatalf("node %d: malformed id answered %v (%s), want InvalidArgument", on, c, got[4].Message)
		}
		// A single renewal is answered alone, as before more existed.
		if err := ka.Send(&api.KeepAliveRequest{LeaseId: ids[0], Seq: 7}); err != nil {
			t.Fatal(err)
		}
		if resp, err := ka.Recv(); err != nil || resp.Seq != 7 || resp.Code != 0 || len(resp.More) != 0 {
			t.Fatalf("node %d: single renewal: %v, %v", on, resp, err)
		}
		// brief: the same answers without the lease.
		if err := ka.Send(&api.KeepAliveRequest{LeaseId: ids[0], Seq: 8, Brief: true,
			More: []*api.KeepAliveRequest{{LeaseId: ids[1], Seq: 9}}}); err != nil {
			t.Fatal(err)
		}
		resp, err = ka.Recv()
		if err != nil || len(resp.More) != 1 {
			t.Fatalf("node %d: brief: %v, %v", on, resp, err)
		}
		for _, a := range []*api.KeepAliveResponse{resp, resp.More[0]} {
			if a.Code != 0 || a.Lease != nil || a.TtlRemaining.AsDuration() <= 0 || len(a.LeaseId) != 16 {
				t.Fatalf("node %d: brief answer %v", on, a)
			}
		}
		_ = ka.CloseSend()
	}
}

// TestKeepAliveRefusesAMessageItCannotServe: a message with more renewals
// than a stream may have in flight, or with a nested more, ends the stream
// with InvalidArgument, and renews nothing of it.
func TestKeepAliveRefusesAMessageItCannotServe(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := tc.client(li).Acquire(ctx, acquireReq("ka/refuse", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := r.Lease.ExpiresAtNs
	big := &api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: 1}
	for i := range keepAliveInFlight {
		big.More = append(big.More, &api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: uint64(2 + i)})
	}
	nested := &api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: 1, More: []*api.KeepAliveRequest{
		{LeaseId: r.Lease.Id, Seq: 2, More: []*api.KeepAliveRequest{{LeaseId: r.Lease.Id, Seq: 3}}},
	}}
	for name, req := range map[string]*api.KeepAliveRequest{"too many": big, "nested": nested} {
		ka, err := tc.client(li).KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ka.Send(req); err != nil {
			t.Fatal(err)
		}
		_, err = ka.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: stream ended with %v, want InvalidArgument", name, err)
		}
	}
	g, err := tc.client(li).Get(ctx, &api.GetRequest{Resource: "ka/refuse"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Lease.GetExpiresAtNs() != before {
		t.Fatalf("a refused message renewed the lease: expiry %d, was %d", g.Lease.GetExpiresAtNs(), before)
	}
}

// TestKeepAliveStopsReadingWhenItsAnswersAreNotRead: a client that sends
// renewals and never reads the answers is held back: past the renewals a
// stream may have in flight (their answers not yet sent), the node stops
// reading the stream, so the client's sends stop too, instead of the node
// piling up answers for it without bound.
func TestKeepAliveStopsReadingWhenItsAnswersAreNotRead(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ka, err := tc.client(li).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Malformed ids: answered at once, nothing proposed.
	req := &api.KeepAliveRequest{LeaseId: []byte("x"), Seq: 1}
	for i := range keepAliveInFlight - 1 {
		req.More = append(req.More, &api.KeepAliveRequest{LeaseId: []byte("x"), Seq: uint64(2 + i)})
	}
	const messages = 200 // ~20 MB of answers if nothing held them back
	var sent atomic.Int64
	go func() {
		for range messages {
			if ka.Send(req) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Wait until the sends stop (held back, or all done), not for a
	// fixed time: a slow machine only makes them stop later.
	last, still := int64(-1), 0
	for still < 5 && last < messages {
		time.Sleep(200 * time.Millisecond)
		if n := sent.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	if n := sent.Load(); n >= messages/2 {
		t.Fatalf("%d of %d messages of %d renewals sent with no answer read: the node kept reading", n, messages, keepAliveInFlight)
	}
	cancel()
}
