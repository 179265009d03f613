package cluster_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hashicorp/go-hclog"
	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
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

// syncBuffer is a bytes.Buffer safe for the loggers of several nodes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logTime returns the time of the first line of log, written at or after
// from, that contains what (hclog's timestamp), and whether there is one.
func logTime(log string, from time.Time, what string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, what) {
			continue
		}
		ts, _, _ := strings.Cut(line, " ")
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		if err == nil && !at.Before(from) {
			return at, true
		}
	}
	return time.Time{}, false
}

// A follower notices a silent leader once the heartbeat timeout (plus a
// random fifth of it) has passed since the last contact, and raft starts
// its election at once, instead of at raft's own timer, drawn between one
// and two heartbeat timeouts (an election then waited for the later of
// the two followers' draws). Shown by the followers' logs: the watch's
// "checking now" never before the heartbeat timeout, and raft's "starting
// election" right after it.
func TestFollowersActOnASilentLeaderAfterTheHeartbeatTimeout(t *testing.T) {
	const ht = 2 * time.Second
	logs := make([]*syncBuffer, 3)
	lc := testcluster.NewLocal(t, 3, func(i int, c *cluster.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = ht, ht, 200*time.Millisecond
		logs[i] = &syncBuffer{}
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.ID, Level: hclog.Info, Output: logs[i], TimeFormat: "2006-01-02T15:04:05.000Z0700"})
	})
	old := lc.Leader()
	var others []int
	for i := range lc.Nodes {
		if i != old {
			others = append(others, i)
		}
	}
	cut := time.Now()
	lc.Partition(old)
	next := lc.Leader(others...)
	t.Logf("n%d replaced n%d %v after the cut (heartbeat timeout %v)", next+1, old+1, time.Since(cut).Round(time.Millisecond), ht)
	acted := false
	for _, i := range others {
		checked, ok := logTime(logs[i].String(), cut, "no contact from the leader")
		if !ok {
			continue
		}
		if checked.Before(cut.Add(ht - 50*time.Millisecond)) {
			t.Fatalf("n%d checked %v after the cut, before the heartbeat timeout %v", i+1, checked.Sub(cut), ht)
		}
		if elected, ok := logTime(logs[i].String(), checked.Add(-time.Millisecond), "starting election"); ok && elected.Sub(checked) < 250*time.Millisecond {
			acted = true
			t.Logf("n%d: checked %v after the cut, election %v later", i+1, checked.Sub(cut).Round(time.Millisecond), elected.Sub(checked))
		}
	}
	if !acted {
		for _, i := range others {
			t.Logf("n%d log:\n%s", i+1, logs[i].String())
		}
		t.Fatal("no follower started an election right after checking its silent leader")
	}
}
