package jepsen

import (
	"context"
	"encoding/hex"
	"sync"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// PollConvergence asks every node for its status, all at once, every
// 100 ms until CheckReplicasConverge decides (valid or invalid) or timeout
// passes, and returns the rounds and the verdict.
func PollConvergence(ctx context.Context, cl *Cluster, timeout time.Duration) ([][]checker.NodeStatus, checker.Result) {
	deadline := time.Now().Add(timeout)
	nodes := cl.Nodes()
	var rounds [][]checker.NodeStatus
	for {
		round := make([]checker.NodeStatus, len(nodes))
		var wg sync.WaitGroup
		for i, id := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := checker.NodeStatus{Node: id}
				st, err := cl.StateStatus(ctx, id)
				s.TimeNs = history.Now()
				if err != nil {
					s.Err = err.Error()
				} else {
					s.AppliedIndex, s.CommitIndex, s.HashIndex, s.Hash = st.AppliedIndex, st.CommitIndex, st.StateHashIndex, hex.EncodeToString(st.StateHash)
				}
				round[i] = s
			}()
		}
		wg.Wait()
		rounds = append(rounds, round)
		r := checker.CheckReplicasConverge(nodes, rounds)
		if r.Verdict != history.Unknown || time.Now().After(deadline) || ctx.Err() != nil {
			return rounds, r
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}
