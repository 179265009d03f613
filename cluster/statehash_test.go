package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
)

func TestReplicasReportTheSameStateHash(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	c := tc.client(0)
	ctx := ctxT(t)
	for _, res := range []string{"h/1", "h/2", "h/3"} {
		req := acquireReq(res, 10*time.Second)
		req.RequestId = "hash-" + res
		if _, err := c.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	converged := func() (hash []byte, index uint64) {
		var sts []*api.StatusResponse
		eventually(t, 10*time.Second, "three nodes at one state index", func() bool {
			sts = sts[:0]
			for _, n := range tc.nodes {
				st, err := n.ClusterServer().Status(ctx, &api.StatusRequest{StateHash: true})
				if err != nil {
					return false
				}
				sts = append(sts, st)
			}
			for _, st := range sts[1:] {
				if st.StateHashIndex != sts[0].StateHashIndex || st.AppliedIndex != sts[0].AppliedIndex {
					return false
				}
			}
			return true
		})
		for _, st := range sts {
			if len(st.StateHash) != 32 || !bytes.Equal(st.StateHash, sts[0].StateHash) {
				t.Fatalf("at index %d: %s has hash %x, %s has %x", st.StateHashIndex, sts[0].Id, sts[0].StateHash, st.Id, st.StateHash)
			}
		}
		return sts[0].StateHash, sts[0].StateHashIndex
	}
	h1, i1 := converged()
	if st, err := tc.nodes[0].ClusterServer().Status(ctx, &api.StatusRequest{}); err != nil || st.StateHash != nil || st.StateHashIndex != 0 {
		t.Fatalf("a status that did not ask for the hash: %v %v", st, err)
	}
	if i1 == 0 {
		t.Fatal("state hash index 0 after three grants")
	}

	// A follower restarted from a snapshot of its own hashes the same.
	fi, f := tc.follower()
	if err := f.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	tc.stop(fi)
	req := acquireReq("h/4", 10*time.Second)
	if _, err := tc.client((fi+1)%3).Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	tc.start(fi)
	h2, i2 := converged()
	if i2 <= i1 || bytes.Equal(h1, h2) {
		t.Fatalf("after a grant: index %d → %d, hash %x → %x", i1, i2, h1, h2)
	}
}
