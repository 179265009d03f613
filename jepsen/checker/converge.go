package checker

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// NameConverge is the replica convergence
const NameConverge = "replicas-converge"

// AnomalyDivergentReplicas: two nodes report different state hashes at the
// same state index.
const AnomalyDivergentReplicas = "divergent-replicas"

// NodeStatus is one node's answer to one status poll: its applied and
// commit index, and the hash of its state machine (hex) with the index it
// was taken at. Err is set when the node did not answer.
type NodeStatus struct {
	Node         string `json:"node"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	CommitIndex  uint64 `json:"commit_index,omitempty"`
	HashIndex    uint64 `json:"state_hash_index,omitempty"`
	Hash         string `json:"state_hash,omitempty"`
	Err          string `json:"error,omitempty"`
	TimeNs       int64  `json:"time_ns"`
}

// CheckReplicasConverge decides from rounds of status polls (after healing
// and the quiet phase) whether the replicas converged:
//   - invalid (divergent-replicas) if any two nodes ever reported different
//     hashes at the same state index;
//   - valid if every node reported a hash at one common index at least as
//     high as the highest state index any node reported in the first
//     round (so every node caught up with the most advanced one as the
//     check began) and the hashes agree;
//   - unknown otherwise (a node never answered, or never reached the
//     others' index within the polls).
func CheckReplicasConverge(nodes []string, rounds [][]NodeStatus) Result {
	f := NewFinding(NameConverge)
	seen := map[string]map[uint64]string{} // node → index → hash
	target := uint64(0)
	for i, round := range rounds {
		for _, s := range round {
			if s.Err != "" || s.Hash == "" {
				continue
			}
			if i == 0 && s.HashIndex > target {
				target = s.HashIndex
			}
			if seen[s.Node] == nil {
				seen[s.Node] = map[uint64]string{}
			}
			seen[s.Node][s.HashIndex] = s.Hash
		}
	}
	// Divergence at any index two nodes share.
	byIndex := map[uint64]map[string]string{} // index → node → hash
	for n, m := range seen {
		for idx, h := range m {
			if byIndex[idx] == nil {
				byIndex[idx] = map[string]string{}
			}
			byIndex[idx][n] = h
		}
	}
	idxs := make([]uint64, 0, len(byIndex))
	for idx := range byIndex {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		m := byIndex[idx]
		if len(distinct(m)) > 1 {
			f.Invalid(AnomalyDivergentReplicas, "at state index %d: %s", idx, describeHashes(m))
		}
	}
	// Convergence: the highest index every node reported, at or past the
	// target.
	var common uint64
	found := false
	for _, idx := range idxs {
		if len(byIndex[idx]) == len(nodes) && idx >= target {
			common, found = idx, true
		}
	}
	switch {
	case f.R.Verdict == Invalid:
	case found:
		f.R.Checked = len(nodes)
		f.R.Witness = fmt.Sprintf("%d nodes at state index %d (highest at the start: %d), hash %.16s", len(nodes), common, target, byIndex[common][nodes[0]])
	default:
		var last []string
		if len(rounds) > 0 {
			for _, s := range rounds[len(rounds)-1] {
				if s.Err != "" {
					last = append(last, fmt.Sprintf("%s: %s", s.Node, s.Err))
				} else {
					last = append(last, fmt.Sprintf("%s applied %d, state %d", s.Node, s.AppliedIndex, s.HashIndex))
				}
			}
		}
		f.Unknown("the nodes never reported one state index >= %d in %d polls; last: %s", target, len(rounds), strings.Join(last, ", "))
	}
	return f.Done("node status")
}

func distinct(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, h := range m {
		out[h] = true
	}
	return out
}

func describeHashes(m map[string]string) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s hash %.16s", n, m[n]))
	}
	return strings.Join(parts, ", ")
}
