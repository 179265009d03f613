package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// silentFailoverBound is how long an acquire may take after the leader
// went silent: about one election (the default heartbeat timeout is drawn
// from [500 ms, 1 s]) plus the client's attempt timeout, with slack for a
// loaded machine and the race detector.
const silentFailoverBound = 3 * time.Second

// freeze stops node i with SIGSTOP: its kernel still accepts connections
// and acknowledges data, the process answers nothing (a silent leader, as
// a frozen host or a dropped link is). It is resumed at the end of the test.
func freeze(t *testing.T, c *testcluster.Cluster, i int) {
	t.Helper()
	c.Signal(i, syscall.SIGSTOP)
	t.Cleanup(func() { c.Signal(i, syscall.SIGCONT) })
}

// others returns the indexes of the nodes other than i.
func others(c *testcluster.Cluster, i int) []int {
	var out []int
	for j := range c.Procs {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// A follower that forwards to a leader which stopped answering gives up on
// that hop and forwards to the new leader inside the caller's deadline: a
// caller talking to that one follower only (no client failover) gets its
// grant after about one election, not after its deadline.
func TestFollowerForwardingToSilentLeaderReroutesWithinAnElection(t *testing.T) {
	c := startCluster(t, 3)
	li := c.Leader()
	f := others(c, li)[0]
	warm(t, c, f)
	freeze(t, c, li)
	lost := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Lease(f).Acquire(ctx, &api.AcquireRequest{
		Resource: "silent/hop", Holder: "e2e", Ttl: durationpb.New(5 * time.Second), RequestId: "silent-hop-1",
	})
	took := time.Since(lost)
	if err != nil {
		t.Fatalf("acquire through a follower %v after the leader went silent: %v", took, err)
	}
	t.Logf("granted token %d through the follower %v after the leader went silent", r.Lease.Token, took)
	if took > silentFailoverBound {
		t.Fatalf("acquire took %v after the leader went silent, want at most %v", took, silentFailoverBound)
	}
}

// warm opens the connections a forwarded call uses (the test's own to node
// i, node i's to the leader), so that the measured call pays no dial.
func warm(t *testing.T, c *testcluster.Cluster, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Lease(i).Get(ctx, &api.GetRequest{Resource: "warm"}); err != nil {
		t.Fatalf("warming node %d: %v", i, err)
	}
}

// The client's Acquire, after the leader went silent, succeeds within
// about an election whichever node the client tries first: a follower
// (which re-routes its hop) or the frozen leader itself (which the client
// gives up on after its attempt timeout). While a quorum is up, no call
// fails.
func TestClientAcquireAfterSilentLeaderSucceedsWithinAnElection(t *testing.T) {
	for _, first := range []string{"follower", "frozen leader"} {
		t.Run(first+" first", func(t *testing.T) {
			c := startCluster(t, 3)
			li := c.Leader()
			order := others(c, li)
			if first == "frozen leader" {
				order = append([]int{li}, order...)
			} else {
				order = append(order[:1], append([]int{li}, order[1:]...)...)
			}
			var eps []string
			for _, i := range order {
				eps = append(eps, c.Procs[i].Addr)
			}
			cl, err := client.New(client.Config{Endpoints: eps})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := cl.Acquire(ctx, "silent/warm", client.WithTTL(5*time.Second))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}

			freeze(t, c, li)
			lost := time.Now()
			for k := 0; k < 3; k++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				l, err := cl.Acquire(ctx, fmt.Sprintf("silent/%d", k), client.WithTTL(5*time.Second))
				cancel()
				took := time.Since(start)
				if err != nil {
					t.Fatalf("acquire %d, %v after the leader went silent, failed after %v while a quorum is up: %v", k, time.Since(lost), took, err)
				}
				t.Logf("acquire %d granted token %d in %v (%v after the leader went silent)", k, l.Token(), took, time.Since(lost))
				if took > silentFailoverBound {
					t.Fatalf("acquire %d took %v, want at most %v", k, took, silentFailoverBound)
				}
				l.Release(context.Background())
			}

			// The old leader comes back as a follower; calls keep working.
			c.Signal(li, syscall.SIGCONT)
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := cl.Acquire(ctx, "silent/after", client.WithTTL(5*time.Second)); err != nil {
				t.Fatalf("acquire after the old leader resumed: %v", err)
			}
		})
	}
}

// A keep-alive stream that a follower relays to the leader ends, with
// Unavailable, soon after that leader goes silent, so the client reopens
// it elsewhere: it is not held open, unanswered, until the client's own
// silence detection gives up.
func TestKeepAliveRelayEndsWhenItsLeaderGoesSilent(t *testing.T) {
	c := startCluster(t, 3)
	li := c.Leader()
	f := others(c, li)[0]
	r, err := c.Acquire("silent/keepalive", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Lease(f).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.Code != 0 {
		t.Fatalf("renewal through the relay before the freeze: %v, %v", resp, err)
	}
	freeze(t, c, li)
	lost := time.Now()
	if err := stream.Send(&api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Logf("relayed stream ended %v after the leader went silent: %v", time.Since(lost), err)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("relayed stream ended with %v, want Unavailable", err)
			}
			break
		}
		t.Logf("answer %v after the freeze: seq %d code %d", time.Since(lost), resp.Seq, resp.Code)
	}
	if took := time.Since(lost); took > silentFailoverBound {
		t.Fatalf("relayed stream ended %v after the leader went silent, want at most %v", took, silentFailoverBound)
	}
}
