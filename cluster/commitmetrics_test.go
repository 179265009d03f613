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

// TestCommitMetricsSplitTheDiskFromTheNetwork: a write is timed on every
// node as a log write, and by the leader as a round trip to each follower,
// labelled with the follower's id.
func TestCommitMetricsSplitTheDiskFromTheNetwork(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	writes := make([]uint64, len(tc.nodes))
	trips := make([]map[string]uint64, len(tc.nodes))
	for i, n := range tc.nodes {
		writes[i] = histogramCounts(t, n, "leasefence_log_write_seconds")[""]
		trips[i] = histogramCounts(t, n, "leasefence_replication_seconds")
	}
	if _, err := tc.client(li).Acquire(ctxT(t), acquireReq("metrics/commit", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i, n := range tc.nodes {
		eventually(t, 10*time.Second, "the write timed on "+tc.cfgs[i].ID, func() bool {
			return histogramCounts(t, n, "leasefence_log_write_seconds")[""] > writes[i]
		})
	}
	// Whoever leads now (usually the node that took the write) has timed
	// a round trip to each follower since.
	eventually(t, 10*time.Second, "the round trip timed to both followers", func() bool {
		li, leader := tc.leader()
		got := histogramCounts(t, leader, "leasefence_replication_seconds")
		for i := range tc.nodes {
			if id := tc.cfgs[i].ID; i != li && got[id] <= trips[li][id] {
				return false
			}
		}
		return true
	})
}
