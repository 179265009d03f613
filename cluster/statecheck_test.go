package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// corruptReplica makes one node's state differ from the others' without
// touching its log: it applies a grant of "ghost/1" to that node's state
// machine only, as a memory error or a nondeterministic bug might. The
// applied index is left alone, so the node goes on applying the log.
func corruptReplica(t *testing.T, n *Node) {
	t.Helper()
	e, err := fsm.EncodeBatch(&fsmpb.Batch{SkewMarginNs: int64(time.Second), DedupKeepNs: int64(time.Hour), Commands: []*fsmpb.Command{
		{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Resource: "ghost/1", Holder: "ghost", TtlNs: int64(time.Hour), LeaseId: make([]byte, fsm.LeaseIDLen)}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n.sm.mu.Lock()
	defer n.sm.mu.Unlock()
	if _, err := n.sm.st.Apply(e); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaWithDivergentStateRaisesAlarmAndServesNothing: issue 14 §1
// (b). One follower's state is made to differ; at the next checkpoint the
// voters compare hashes, the odd one out marks itself corrupt (status,
// metric, log), refuses every lease call with Unavailable, refuses
// leadership when it is handed to it, and refuses to start again; the
// healthy nodes stay healthy and keep serving.
func TestReplicaWithDivergentStateRaisesAlarmAndServesNothing(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.StateCheckEvery = 4
		c.StateCheckPoll = 100 * time.Millisecond
	})
	ctx := ctxT(t)
	li, _ := tc.leader()
	c := tc.client(li)
	if _, err := c.Acquire(ctx, acquireReq("real/1", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	tc.waitAllApplied(t)
	fi, f := tc.follower()
	corruptReplica(t, f)
	for i := 0; i < 8; i++ { // past the next checkpoints
		r, err := c.Acquire(ctx, acquireReq("real/2", 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "the divergent follower marks itself corrupt", func() bool {
		st, err := f.ClusterServer().Status(ctx, &api.StatusRequest{})
		return err == nil && st.StateCorrupt != ""
	})
	for i, n := range tc.nodes {
		if i != fi && n.StateCorrupt() != "" {
			t.Fatalf("healthy %s marked corrupt: %s", n.ID(), n.StateCorrupt())
		}
	}
	st, _ := f.ClusterServer().Status(ctx, &api.StatusRequest{})
	if len(st.StateCheckpoints) == 0 {
		t.Fatal("no checkpoints in status")
	}
	if !strings.Contains(st.StateCorrupt, "agree on") {
		t.Fatalf("reason: %q", st.StateCorrupt)
	}
	if got := metricValue(t, f, "leasefence_state_corrupt"); got != 1 {
		t.Fatalf("leasefence_state_corrupt = %v", got)
	}
	if ok, why := f.healthy(); ok || !strings.Contains(why, "corrupt") {
		t.Fatalf("health of the corrupt node: %v %q", ok, why)
	}
	// Reads (stale ones too) and writes are refused on the corrupt node.
	fc := tc.client(fi)
	for name, call := range map[string]func() error{
		"get":       func() error { _, err := fc.Get(ctx, &api.GetRequest{Resource: "ghost/1"}); return err },
		"stale get": func() error { _, err := fc.Get(ctx, &api.GetRequest{Resource: "ghost/1", Stale: true}); return err },
		"acquire":   func() error { _, err := fc.Acquire(ctx, acquireReq("real/3", 10*time.Second)); return err },
	} {
		err := call()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("%s on the corrupt node: %v", name, err)
		}
	}
	// Handed leadership, it gives it away and never serves as leader.
	_, leader := tc.leader()
	if err := leader.Raft().LeadershipTransferToServer(raft.ServerID(f.ID()), raft.ServerAddress(f.Addr())).Error(); err != nil {
		t.Fatalf("transfer to the corrupt node: %v", err)
	}
	servedAsLeader := false
	eventually(t, 15*time.Second, "a healthy leader", func() bool {
		servedAsLeader = servedAsLeader || f.IsLeader()
		for i, n := range tc.nodes {
			if i != fi && n.IsLeader() {
				return true
			}
		}
		return false
	})
	if servedAsLeader || f.IsLeader() {
		t.Fatal("the corrupt node served as leader")
	}
	// The healthy majority still serves.
	hc := tc.client((fi + 1) % 3)
	eventually(t, 15*time.Second, "the healthy majority grants", func() bool {
		_, err := hc.Acquire(ctx, acquireReq("real/4", 10*time.Second))
		return err == nil
	})
	// Restarted, it refuses to start until replaced.
	tc.stop(fi)
	if _, err := os.Stat(filepath.Join(tc.cfgs[fi].DataDir, corruptMarker)); err != nil {
		t.Fatal(err)
	}
	n, err := Start(tc.cfgs[fi])
	if err == nil {
		tc.nodes[fi] = n
		t.Fatal("a node marked corrupt started again")
	}
	if !errors.Is(err, ErrCorruptStore) || !strings.Contains(err.Error(), "members remove") {
		t.Fatalf("restart: %v", err)
	}
}

// metricValue reads one unlabelled metric of node n.
func metricValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			m := mf.Metric[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestCorruptLeaderFencesItselfNotItsFollowers: when the leader's state is
// the one that differs, the majority rule fences the leader (it hands
// leadership away), not the two followers that agree with each other.
func TestCorruptLeaderFencesItselfNotItsFollowers(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.StateCheckEvery = 4
		c.StateCheckPoll = 100 * time.Millisecond
	})
	ctx := ctxT(t)
	li, leader := tc.leader()
	corruptReplica(t, leader)
	hc := tc.client((li + 1) % 3)
	eventually(t, 15*time.Second, "the corrupt leader fences itself", func() bool {
		if r, err := hc.Acquire(ctx, acquireReq("real/5", 10*time.Second)); err == nil {
			_, _ = hc.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
		}
		return leader.StateCorrupt() != ""
	})
	eventually(t, 15*time.Second, "a healthy leader", func() bool {
		for i, n := range tc.nodes {
			if i != li && n.IsLeader() {
				return true
			}
		}
		return false
	})
	if leader.IsLeader() {
		t.Fatal("the corrupt node still leads")
	}
	for i, n := range tc.nodes {
		if i != li && n.StateCorrupt() != "" {
			t.Fatalf("healthy follower %s fenced: %s", n.ID(), n.StateCorrupt())
		}
	}
	eventually(t, 15*time.Second, "the healthy majority grants", func() bool {
		_, err := hc.Acquire(ctx, acquireReq("real/6", 10*time.Second))
		return err == nil
	})
}

// TestJudgeDecidesAtTheNewestIndexAMajorityAgreesOn: the majority rule,
// including the case found with writes flowing (the newest checkpoint
// hashed by one peer only: a 1–1 split there must not end the round).
func TestJudgeDecidesAtTheNewestIndexAMajorityAgreesOn(t *testing.T) {
	h := func(s string) []byte { return []byte(s) }
	own := []checkpoint{{8, h("A8")}, {16, h("X16")}, {24, h("X24")}}
	cases := []struct {
		name   string
		own    []checkpoint
		voter  bool
		peers  map[string]map[uint64][]byte
		result string
		index  uint64
	}{
		{"healthy, both peers agree", []checkpoint{{8, h("A8")}}, true,
			map[string]map[uint64][]byte{"n2": {8: h("A8")}, "n3": {8: h("A8")}}, "match", 8},
		{"healthy, one peer is enough with me", []checkpoint{{8, h("A8")}}, true,
			map[string]map[uint64][]byte{"n2": {8: h("A8")}}, "match", 8},
		{"corrupt: the newest index is split 1-1, an older one decides", own, true,
			map[string]map[uint64][]byte{"n2": {16: h("A16"), 24: h("A24")}, "n3": {16: h("A16")}}, "corrupt", 16},
		{"not enough hashed yet", own, true,
			map[string]map[uint64][]byte{"n2": {32: h("A32")}}, "", 0},
		{"all differ", []checkpoint{{8, h("A8")}}, true,
			map[string]map[uint64][]byte{"n2": {8: h("B8")}, "n3": {8: h("C8")}}, "undecided", 8},
		{"a non-voter follows the voters", []checkpoint{{8, h("X8")}}, false,
			map[string]map[uint64][]byte{"n2": {8: h("A8")}, "n3": {8: h("A8")}}, "corrupt", 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.own, "n1", tc.voter, tc.peers, 2)
			if v.result != tc.result || v.index != tc.index {
				t.Fatalf("got %q at %d, want %q at %d (%+v)", v.result, v.index, tc.result, tc.index, v)
			}
		})
	}
	v := judge([]checkpoint{{8, h("A8")}}, "n1", true, map[string]map[uint64][]byte{"n2": {8: h("A8")}, "n3": {8: h("B8")}}, 2)
	if v.result != "match" || len(v.others) != 1 || v.others[0].ids[0] != "n3" {
		t.Fatalf("a differing peer is named: %+v", v)
	}
}

// TestCheckpointIntervalGrowsWithTheState: up to 64 Ki leases a checkpoint
// every StateCheckEvery indexes; beyond, the interval doubles with the
// leases, and its boundaries stay a subset of the shorter interval's.
func TestCheckpointIntervalGrowsWithTheState(t *testing.T) {
	c := newStateCheckpoints(4096)
	for _, tc := range []struct {
		leases int
		want   uint64
	}{{0, 4096}, {1 << 16, 4096}, {1<<16 + 1, 8192}, {1 << 20, 65536}, {1 << 21, 131072}} {
		if got := c.interval(tc.leases); got != tc.want {
			t.Fatalf("interval(%d) = %d, want %d", tc.leases, got, tc.want)
		}
	}
	if !c.due(8191, 8192, 0) || c.due(8191, 8192, 1<<20) || !c.due(65535, 65537, 1<<20) || c.due(65536, 70000, 1<<20) {
		t.Fatal("boundaries")
	}
}
