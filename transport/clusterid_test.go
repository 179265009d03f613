package transport

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node refuses every Raft RPC of a peer of another cluster (a node
// restored from another backup or with another token bump must neither vote
// nor replicate), and lets through a peer of its own cluster and a peer
// without an id yet (a joining node).
func TestRaftRPCsFromAnotherClusterAreRefused(t *testing.T) {
	id := func(s string) func(*Config) {
		return func(c *Config) { c.ClusterID = func() string { return s } }
	}
	b := startNode(t, "127.0.0.1:0", id("cluster-b"))
	reqs := []any{
		&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 7},
		&raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 7},
		&raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 7},
		&raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}},
		&raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: 7, Size: 1},
	}

	foreign := startNode(t, "127.0.0.1:0", id("cluster-a"))
	for _, req := range reqs {
		if _, err := call(foreign.tr, b.addr, req, []byte("x")); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%T from another cluster: %v, want FailedPrecondition", req, err)
		}
	}
	// The pipeline stream is refused too.
	p, err := foreign.tr.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatalf("open pipeline: %v", err)
	}
	fut, err := p.AppendEntries(reqs[0].(*raft.AppendEntriesRequest), &raft.AppendEntriesResponse{})
	if err == nil {
		err = fut.Error()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("pipelined append from another cluster: %v, want FailedPrecondition", err)
	}
	p.Close()

	for _, peer := range []struct {
		name   string
		mutate func(*Config)
	}{
		{"same cluster", id("cluster-b")},
		{"no id yet", id("")},
		{"no id function", nil},
	} {
		n := startNode(t, "127.0.0.1:0", peer.mutate)
		seen := answerOne(t, b.tr, &raft.RequestVoteResponse{Term: 7, Granted: true}, nil)
		resp, err := call(n.tr, b.addr, reqs[1], nil)
		if err != nil {
			t.Fatalf("%s: request-vote refused: %v", peer.name, err)
		}
		<-seen
		if !resp.(*raft.RequestVoteResponse).Granted {
			t.Errorf("%s: vote not passed through", peer.name)
		}
	}
}
