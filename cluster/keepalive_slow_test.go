package cluster

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// A leader whose commits take longer than a second (a disk that stalls)
// but that is alive: its keep-alive streams answered nothing until the
// renewal committed, the client took the silence for a dead node, moved
// the stream and sent the renewal again, so no renewal was ever confirmed
// and the lease ended although the cluster renewed it (reviewer). The
// leader now sends heartbeats while renewals are out; the lease lives.
func TestAKeepAliveLeaseLivesThroughSlowCommits(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
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
		t.Fatalf("the lease ended (%v) although every renewal committed within 1.6 s; %+v", l.Err(), c.Stats())
	case <-time.After(10 * time.Second):
	}
	if st := c.Stats(); st.RenewalsConfirmed == 0 {
		t.Fatalf("no renewal confirmed: %+v", st)
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
