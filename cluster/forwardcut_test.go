package cluster_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// A follower that forwarded a call carrying a request id to a leader that
// then went silent has sent it: when the hop is cut and no leader can be
// found before the caller's deadline, the call's outcome is unknown (the
// silent leader may have appended it, and a successor may commit it), so
// the follower answers INDETERMINATE with the request id — not "no
// leader", which tells the client nothing was sent.
func TestACutHopThenNoLeaderIsIndeterminate(t *testing.T) {
	lc := testcluster.NewLocal(t, 3, func(_ int, c *cluster.Config) {
		// Slow enough that the follower still forwards to the leader it
		// knows when the call arrives.
		// (2 s: room for a stalled test machine between Freeze and the
		// call.)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 500*time.Millisecond
	})
	leader := lc.Leader()
	var rest []int
	for i := range lc.Nodes {
		if i != leader {
			rest = append(rest, i)
		}
	}
	f, other := rest[0], rest[1]
	mustAcquire(t, lc.Client(f), "warm") // the follower's connection to the leader is up
	// No quorum is left for the follower: the leader is silent (every
	// byte to and from it held), the third node cut off.
	lc.Partition(other)
	lc.Freeze(leader)
	defer lc.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	_, err := lc.Client(f).Acquire(ctx, &api.AcquireRequest{
		Resource: "r", Holder: "test", Ttl: durationpb.New(time.Minute), RequestId: "req-cut",
	})
	st := status.Convert(err)
	var reqID string
	indeterminate := false
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Reason == api.ReasonIndeterminate && ei.Domain == api.ErrorDomain {
			indeterminate, reqID = true, ei.Metadata[api.MetaRequestID]
		}
	}
	if st.Code() != codes.Unavailable || !indeterminate || reqID != "req-cut" {
		t.Fatalf("the follower answered %v; want Unavailable INDETERMINATE with request id req-cut", err)
	}
}
