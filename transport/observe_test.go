package transport

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestOnAppendEntriesReportsEveryAnsweredRequest: the hook sees each
// answered AppendEntries, heartbeat, unary or pipelined, with the
// follower's id, the request, the decoded answer and a send time taken
// before the request left (so at least the follower's time to answer
// before the report), and it runs before raft is handed the answer.
func TestOnAppendEntriesReportsEveryAnsweredRequest(t *testing.T) {
	type report struct {
		peer raft.ServerID
		sent time.Time
		at   time.Time
		req  *raft.AppendEntriesRequest
		resp raft.AppendEntriesResponse
	}
	var (
		mu      sync.Mutex
		reports []report
	)
	leader := startNode(t, "127.0.0.1:0", func(c *Config) {
		c.OnAppendEntries = func(peer raft.ServerID, sent time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, report{peer, sent, time.Now(), req, *resp})
		}
	})
	follower := startNode(t, "127.0.0.1:0", nil)
	const delay = 30 * time.Millisecond
	answerAfter(t, follower.tr, delay)

	type call struct {
		req        *raft.AppendEntriesRequest
		start, end time.Time // around the call, up to raft's receipt of the answer
	}
	var calls []call
	var resp raft.AppendEntriesResponse
	for _, req := range []*raft.AppendEntriesRequest{appendRequest(leader, 0, 0, 0), appendRequest(leader, 0, 1, 16)} {
		start := time.Now()
		if err := leader.tr.AppendEntries("f1", follower.addr, req, &resp); err != nil {
			t.Fatalf("unary (%d entries): %v", len(req.Entries), err)
		}
		calls = append(calls, call{req, start, time.Now()})
	}
	p, err := leader.tr.AppendEntriesPipeline("f1", follower.addr)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	defer p.Close()
	req := appendRequest(leader, 1, 2, 16)
	start := time.Now()
	if _, err := p.AppendEntries(req, &resp); err != nil {
		t.Fatalf("pipelined send: %v", err)
	}
	if err := (<-p.Consumer()).Error(); err != nil {
		t.Fatalf("pipelined answer: %v", err)
	}
	calls = append(calls, call{req, start, time.Now()})

	mu.Lock()
	defer mu.Unlock()
	if len(reports) != len(calls) {
		t.Fatalf("%d reports, want one per answered request (heartbeat, unary, pipelined): %+v", len(reports), reports)
	}
	for i, r := range reports {
		c := calls[i]
		if r.peer != "f1" || r.req != c.req || !r.resp.Success || r.resp.Term != c.req.Term {
			t.Errorf("report %d: peer %s, request %p (want %p), answer %+v: want f1, raft's request, a success in term %d", i, r.peer, r.req, c.req, r.resp, c.req.Term)
		}
		if r.sent.Before(c.start) || r.at.Sub(r.sent) < delay || r.at.After(c.end) {
			t.Errorf("report %d: sent %v, reported %v after the call began; the call ended %v after it began: want sent within the call, at least the follower's %v before the report, and the report before raft got the answer",
				i, r.sent.Sub(c.start), r.at.Sub(c.start), c.end.Sub(c.start), delay)
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
