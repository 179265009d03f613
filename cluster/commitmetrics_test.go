package cluster

import (
	"testing"
	"time"
)

// histogramCounts reads the sample counts of histogram name on node n, by
// the value of its one label ("" when it has none).
func histogramCounts(t *testing.T, n *Node, name string) map[string]uint64 {
	t.Helper()
	mfs, err := n.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			label := ""
			if len(m.Label) > 0 {
				label = m.Label[0].GetValue()
			}
			out[label] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestCommitMetricsSplitTheDiskFromTheNetwork: after a write, every node
// has timed its log writes, and the leader has timed the replication round
// trip to each follower by id (and to no one else).
func TestCommitMetricsSplitTheDiskFromTheNetwork(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	if _, err := tc.client(li).Acquire(ctxT(t), acquireReq("metrics/commit", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i, n := range tc.nodes {
		eventually(t, 10*time.Second, "log writes timed on "+tc.cfgs[i].ID, func() bool {
			return histogramCounts(t, n, "leasefence_log_write_seconds")[""] > 0
		})
	}
	eventually(t, 10*time.Second, "replication timed to both followers", func() bool {
		got := histogramCounts(t, leader, "leasefence_replication_seconds")
		for i := range tc.nodes {
			if i != li && got[tc.cfgs[i].ID] == 0 {
				return false
			}
		}
		return true
	})
	got := histogramCounts(t, leader, "leasefence_replication_seconds")
	if len(got) != 2 {
		t.Errorf("leader's replication_seconds series %v, want the two followers' only", got)
	}
}
