package transport

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestOnAppendEntriesReportsAnsweredRequestsWithEntries: the hook sees each
// answered AppendEntries that carried entries, unary or pipelined, with the
// follower's id and a round trip that includes the follower's time to
// answer; a heartbeat (no entries) is not reported.
func TestOnAppendEntriesReportsAnsweredRequestsWithEntries(t *testing.T) {
	type report struct {
		peer raft.ServerID
		rtt  time.Duration
	}
	var (
		mu      sync.Mutex
		reports []report
	)
	leader := startNode(t, "127.0.0.1:0", func(c *Config) {
		c.OnAppendEntries = func(peer raft.ServerID, rtt time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, report{peer, rtt})
		}
	})
	follower := startNode(t, "127.0.0.1:0", nil)
	const delay = 30 * time.Millisecond
	answerAfter(t, follower.tr, delay)
	taken := func() []report {
		mu.Lock()
		defer mu.Unlock()
		return append([]report(nil), reports...)
	}

	var resp raft.AppendEntriesResponse
	if err := leader.tr.AppendEntries("f1", follower.addr, appendRequest(leader, 0, 0, 0), &resp); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if got := taken(); len(got) != 0 {
		t.Fatalf("a heartbeat was reported: %v", got)
	}
	// Each round trip lies inside the call as the test saw it, and
	// holds the follower's delay.
	var took [2]time.Duration
	start := time.Now()
	if err := leader.tr.AppendEntries("f1", follower.addr, appendRequest(leader, 0, 1, 16), &resp); err != nil {
		t.Fatalf("unary: %v", err)
	}
	took[0] = time.Since(start)
	p, err := leader.tr.AppendEntriesPipeline("f1", follower.addr)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	defer p.Close()
	start = time.Now()
	if _, err := p.AppendEntries(appendRequest(leader, 1, 2, 16), &resp); err != nil {
		t.Fatalf("pipelined send: %v", err)
	}
	if err := (<-p.Consumer()).Error(); err != nil {
		t.Fatalf("pipelined answer: %v", err)
	}
	took[1] = time.Since(start)
	got := taken()
	if len(got) != 2 {
		t.Fatalf("reports %v, want one for the unary and one for the pipelined request", got)
	}
	for i, r := range got {
		if r.peer != "f1" || r.rtt < delay || r.rtt > took[i] {
			t.Errorf("report %+v: want peer f1 and a round trip between the follower's %v and the call's %v", r, delay, took[i])
		}
	}
}

// TestCommitLimitBoundsTheCommitIndexSent: with Config.CommitLimit set,
// the follower receives a commit index no higher than the limit, unary and
// pipelined, and raft's own request is left as it was.
func TestCommitLimitBoundsTheCommitIndexSent(t *testing.T) {
	leader := startNode(t, "127.0.0.1:0", func(c *Config) {
		c.CommitLimit = func() uint64 { return 1 }
	})
	follower := startNode(t, "127.0.0.1:0", nil)
	got := make(chan uint64, 4)
	go func() {
		for {
			select {
			case rpc := <-follower.tr.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				got <- req.LeaderCommitIndex
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil)
			case <-t.Context().Done():
				return
			}
		}
	}()
	var resp raft.AppendEntriesResponse
	req := appendRequest(leader, 0, 3, 8)
	req.LeaderCommitIndex = 3
	if err := leader.tr.AppendEntries("f1", follower.addr, req, &resp); err != nil {
		t.Fatalf("unary: %v", err)
	}
	if c := <-got; c != 1 {
		t.Errorf("unary: the follower was sent commit index %d, want 1 (the limit)", c)
	}
	if req.LeaderCommitIndex != 3 {
		t.Errorf("raft's request was changed: commit index %d, want 3", req.LeaderCommitIndex)
	}
	p, err := leader.tr.AppendEntriesPipeline("f1", follower.addr)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	defer p.Close()
	req = appendRequest(leader, 3, 1, 8)
	req.LeaderCommitIndex = 3
	if _, err := p.AppendEntries(req, &resp); err != nil {
		t.Fatalf("pipelined send: %v", err)
	}
	if err := (<-p.Consumer()).Error(); err != nil {
		t.Fatalf("pipelined answer: %v", err)
	}
	if c := <-got; c != 1 {
		t.Errorf("pipelined: the follower was sent commit index %d, want 1 (the limit)", c)
	}
}
