package checker

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

func st(node string, applied, commit, hashIdx uint64, hash string) NodeStatus {
	return NodeStatus{Node: node, AppliedIndex: applied, CommitIndex: commit, HashIndex: hashIdx, Hash: hash}
}

func TestReplicasConvergeChecker(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	cases := []struct {
		name    string
		rounds  [][]NodeStatus
		verdict string
		want    string
	}{
		{"same index, same hash", [][]NodeStatus{
			{st("n1", 100, 100, 99, "aa"), st("n2", 100, 100, 99, "aa"), st("n3", 100, 100, 99, "aa")},
		}, Valid, "state index 99"},
		{"caught up across polls", [][]NodeStatus{
			{st("n1", 120, 120, 120, "bb"), st("n2", 120, 120, 120, "bb"), st("n3", 40, 40, 40, "cc")},
			{st("n1", 121, 121, 121, "dd"), st("n2", 121, 121, 121, "dd"), st("n3", 120, 120, 120, "bb")},
		}, Valid, "state index 120"},
		{"divergent at one index", [][]NodeStatus{
			{st("n1", 100, 100, 100, "aa"), st("n2", 100, 100, 100, "aa"), st("n3", 100, 100, 100, "ee")},
		}, Invalid, "n3 hash ee"},
		{"divergent between two while the third lags", [][]NodeStatus{
			{st("n1", 100, 100, 100, "aa"), st("n2", 100, 100, 100, "ff"), st("n3", 10, 10, 10, "00")},
		}, Invalid, "n1 hash aa, n2 hash ff"},
		{"never caught up", [][]NodeStatus{
			{st("n1", 100, 100, 100, "aa"), st("n2", 100, 100, 100, "aa"), st("n3", 40, 40, 40, "cc")},
			{st("n1", 101, 101, 101, "ab"), st("n2", 101, 101, 101, "ab"), st("n3", 40, 40, 40, "cc")},
		}, history.Unknown, "n3 applied 40"},
		{"a node never answers", [][]NodeStatus{
			{st("n1", 100, 100, 100, "aa"), st("n2", 100, 100, 100, "aa"), {Node: "n3", Err: "connection refused"}},
		}, history.Unknown, "n3: connection refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := CheckReplicasConverge(nodes, c.rounds)
			if r.Verdict != c.verdict || !strings.Contains(r.Witness, c.want) {
				t.Fatalf("got %v", r)
			}
			if c.verdict == Invalid && r.Anomaly != AnomalyDivergentReplicas {
				t.Fatalf("anomaly %q", r.Anomaly)
			}
		})
	}
}
