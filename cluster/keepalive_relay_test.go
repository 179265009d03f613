package cluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// TestKeepAliveOnAFollowerIsRelayedToTheLeader: renewals sent on a
// follower's KeepAlive stream are answered (through one relayed stream,
// not a forwarded call each); when the leader goes, the relayed stream
// ends with Unavailable, and a new stream on the same follower renews
// through the new leader.
func TestKeepAliveOnAFollowerIsRelayedToTheLeader(t *testing.T) {
	t.Run("leader stops", func(t *testing.T) {
		testKeepAliveRelay(t, func(tc *testCluster, li int) { tc.stop(li) })
	})
	// A transfer keeps the old leader running: it must end the relayed
	// stream rather than refuse every renewal on it for ever.
	t.Run("leadership transferred", func(t *testing.T) {
		testKeepAliveRelay(t, func(tc *testCluster, li int) {
			if err := tc.nodes[li].raft.LeadershipTransfer().Error(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func testKeepAliveRelay(t *testing.T, depose func(tc *testCluster, li int)) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	fi, _ := tc.follower()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fc := tc.client(fi)
	r, err := fc.Acquire(ctx, acquireReq("relay/a", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	renewOn := func(ka api.LeaseService_KeepAliveClient, seq uint64) (*api.KeepAliveResponse, error) {
		if err := ka.Send(&api.KeepAliveRequest{LeaseId: r.Lease.Id, Seq: seq}); err != nil {
			// Send says only io.EOF once the stream ended; Recv has why.
			if _, rerr := ka.Recv(); rerr != nil {
				return nil, rerr
			}
			return nil, err
		}
		return ka.Recv()
	}
	ka, err := fc.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 50; seq++ {
		resp, err := renewOn(ka, seq)
		if err != nil {
			t.Fatalf("renewal %d: %v", seq, err)
		}
		if resp.Seq != seq || resp.Code != 0 || resp.Lease.GetToken() != r.Lease.Token {
			t.Fatalf("renewal %d: %+v", seq, resp)
		}
	}
	depose(tc, li)
	// The relayed stream ends; until it does, answers may be refusals
	// (the old leader stepping down), never a hang.
	var endErr error
	for seq := uint64(51); endErr == nil; seq++ {
		if seq > 1000 {
			t.Fatal("the relayed stream outlived its leader")
		}
		_, endErr = renewOn(ka, seq)
	}
	if c := status.Code(endErr); c != codes.Unavailable {
		t.Fatalf("relayed stream ended with %v, want Unavailable", endErr)
	}
	// A new stream on the same node, once a new leader serves.
	nl, _ := tc.leader()
	if nl == fi {
		t.Log("the follower became the leader: the new stream is local")
	}
	var resp *api.KeepAliveResponse
	eventually(t, 20*time.Second, "a new stream renews", func() bool {
		ka2, err := fc.KeepAlive(ctx)
		if err != nil {
			return false
		}
		defer ka2.CloseSend()
		resp, err = renewOn(ka2, 1)
		return err == nil && resp.Code == 0
	})
	if resp.Lease.GetToken() != r.Lease.Token {
		t.Fatalf("renewed through the new leader: token %d, want %d", resp.Lease.GetToken(), r.Lease.Token)
	}
}
