package cluster

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
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

// A leader whose commits take longer than a second (a disk that stalls)
// but that is alive: its keep-alive streams answered nothing until the
// renewal committed, the client took the silence for a dead node, moved
// the stream and sent the renewal again, so no renewal was ever confirmed
// and the lease ended although the cluster renewed it (reviewer). The
// leader now sends heartbeats while renewals are out; the lease lives.
func TestAKeepAliveLeaseLivesThroughSlowCommits(t *testing.T) {
	if st, ended := keepAliveThroughSlowCommits(t, nil); ended != nil {
		t.Fatalf("the lease ended (%v) although every renewal committed within 1.6 s; %+v", ended, st)
	} else if st.RenewalsConfirmed == 0 {
		t.Fatalf("no renewal confirmed: %+v", st)
	}
}

// keepAliveThroughSlowCommits keeps a lease (ttl 4 s) alive for 10 s on
// a cluster (tweaked) whose leader applies every entry that renews it
// 1.6 s late, and returns the client's counts and the lease's error if it
// ended (nil if it lived).
func keepAliveThroughSlowCommits(t *testing.T, tweak func(*Config)) (client.Stats, error) {
	tc := newTestCluster(t, 3, tweak)
	li, n := tc.leader()
	c, err := client.New(client.Config{Endpoints: []string{tc.cfgs[li].Listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "ka/slow", client.WithTTL(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	// Every entry that renews the lease applies 1.6 s late on the leader,
	// which answers a renewal once it applied it.
	slow := func(e *raft.Log) {
		if bytes.Contains(e.Data, id[:]) {
			time.Sleep(1600 * time.Millisecond)
		}
	}
	n.sm.testBeforeApply.Store(&slow)
	t.Cleanup(func() { n.sm.testBeforeApply.Store(nil) })

	select {
	case <-l.Done():
		return c.Stats(), l.Err()
	case <-time.After(10 * time.Second):
		return c.Stats(), nil
	}
}

// Heartbeats go only to a client that asked for them
// (api.HeaderKeepAliveHeartbeats): an older client takes an empty answer
// for a renewal's, and would never count renewals failing in a row. Also
// through a follower, which relays the stream and the ask to the leader.
func TestKeepAliveHeartbeatsOnlyWhenAskedFor(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, n := tc.leader()
	ctx := ctxT(t)
	cl := tc.client(li)
	g, err := cl.Acquire(ctx, &api.AcquireRequest{Resource: "ka/asked", Holder: "a", Ttl: durationpb.New(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	slow := func(e *raft.Log) {
		if bytes.Contains(e.Data, g.Lease.Id) {
			time.Sleep(1200 * time.Millisecond)
		}
	}
	n.sm.testBeforeApply.Store(&slow)
	t.Cleanup(func() { n.sm.testBeforeApply.Store(nil) })
	fi, _ := tc.follower()
	for i, c := range []struct {
		via   api.LeaseServiceClient
		asked bool
	}{{cl, false}, {cl, true}, {tc.client(fi), false}, {tc.client(fi), true}} {
		asked := c.asked
		sctx := ctx
		if asked {
			sctx = metadata.AppendToOutgoingContext(ctx, api.HeaderKeepAliveHeartbeats, "1")
		}
		stream, err := c.via.KeepAlive(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&api.KeepAliveRequest{LeaseId: g.Lease.Id, Seq: 1}); err != nil {
			t.Fatal(err)
		}
		beats := 0
		for {
			r, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if r.Seq == 1 {
				break
			}
			beats++
		}
		_ = stream.CloseSend()
		if asked && beats == 0 || !asked && beats > 0 {
			t.Errorf("case %d (through a follower: %v), asked for heartbeats %v: %d before a renewal answered after 1.2 s", i, i >= 2, asked, beats)
		}
	}
}
