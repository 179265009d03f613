package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/testcluster"
)

func acquire(t *testing.T, c api.LeaseServiceClient, resource string, d time.Duration) (*api.AcquireResponse, error) {
	return c.Acquire(testcluster.WithTimeout(t, d), &api.AcquireRequest{Resource: resource, Holder: "test", Ttl: durationpb.New(time.Minute)})
}

// mustAcquire acquires resource through c, retrying with one request id
// while the answer is Unavailable (an election under way on a busy
// machine; the request id makes the retry safe), for up to 10 s.
func mustAcquire(t *testing.T, c api.LeaseServiceClient, resource string) *api.AcquireResponse {
	t.Helper()
	req := &api.AcquireRequest{Resource: resource, Holder: "test", Ttl: durationpb.New(time.Minute), RequestId: fmt.Sprintf("%s-%d", resource, time.Now().UnixNano())}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Acquire(testcluster.WithTimeout(t, 5*time.Second), req)
		if err == nil {
			return res
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("acquire %s: %v", resource, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A leader cut off from the others stops leading, the majority elects a
// new one, and the new leader's tokens continue above every token the old
// one issued; after the heal the old leader follows and holds the same
// state.
func TestPartitionedLeaderStepsDownAndTokensContinueAboveItsOwn(t *testing.T) {
	lc := testcluster.NewLocal(t, 3, nil)
	old := lc.Leader()
	c := lc.Client(old)
	var last uint64
	for i := 0; i < 3; i++ {
		res := mustAcquire(t, c, "r")
		last = res.Lease.Token
		for deadline := time.Now().Add(10 * time.Second); ; { // a second release of one lease changes nothing: retry freely
			_, err := c.Release(testcluster.WithTimeout(t, 5*time.Second), &api.ReleaseRequest{LeaseId: res.Lease.Id})
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	lc.Partition(old)
	var rest []int
	for i := range lc.Nodes {
		if i != old {
			rest = append(rest, i)
		}
	}
	now := lc.Leader(rest...)
	deadline := time.Now().Add(10 * time.Second)
	for lc.Nodes[old].IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the partitioned leader still leads")
		}
		time.Sleep(5 * time.Millisecond)
	}
	res := mustAcquire(t, lc.Client(now), "r")
	if res.Lease.Token <= last {
		t.Fatalf("the new leader granted token %d, not above the old leader's %d", res.Lease.Token, last)
	}

	lc.Heal()
	lc.WaitApplied(lc.Nodes[now].AppliedIndex())
	got, err := lc.Client(old).Get(testcluster.WithTimeout(t, 5*time.Second), &api.GetRequest{Resource: "r", Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease.GetToken() != res.Lease.Token {
		t.Fatalf("the healed old leader shows token %d, want %d", got.Lease.GetToken(), res.Lease.Token)
	}
}

// A minority cannot grant: an Acquire sent to a node cut off with no
// majority fails (no leader, or outcome unknown). Its entry may sit in the
// minority's log; once the majority has elected a leader and committed past
// it, the heal discards it on every node (raft: an outcome unknown takes
// effect only if that log wins).
func TestMinorityPartitionCannotGrant(t *testing.T) {
	lc := testcluster.NewLocal(t, 3, nil)
	old := lc.Leader()
	lc.Partition(old)
	_, err := acquire(t, lc.Client(old), "minority", 2*time.Second)
	if err == nil {
		t.Fatal("a node cut off from the majority granted a lease")
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Fatalf("the minority answered %v (%v), want Unavailable or DeadlineExceeded", code, err)
	}
	var rest []int
	for i := range lc.Nodes {
		if i != old {
			rest = append(rest, i)
		}
	}
	now := lc.Leader(rest...)
	mustAcquire(t, lc.Client(now), "majority")
	lc.Heal()
	lc.WaitApplied(lc.Nodes[now].AppliedIndex())
	for i := range lc.Nodes {
		get := func(resource string) *api.Lease {
			got, err := lc.Client(i).Get(testcluster.WithTimeout(t, 5*time.Second), &api.GetRequest{Resource: resource, Stale: true})
			if err != nil {
				t.Fatal(err)
			}
			return got.Lease
		}
		if l := get("minority"); l != nil {
			t.Fatalf("%s holds a lease the minority was asked for: %v", lc.Nodes[i].ID(), l)
		}
		if get("majority") == nil {
			t.Fatalf("%s lacks the majority's grant", lc.Nodes[i].ID())
		}
	}
}
