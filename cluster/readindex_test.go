package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// peerAcks counts a voter only for an acceptance, in the leader's term, of
// a request sent at or after the read arrived; a late answer from an older
// term does not replace a newer one; a refusal or an answer from another
// term is not an acceptance.
func TestPeerAcksConfirmOnlyWithFreshAcceptances(t *testing.T) {
	a := newPeerAcks()
	t0 := time.Now()
	ok := func(term uint64) (*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) {
		return &raft.AppendEntriesRequest{Term: term}, &raft.AppendEntriesResponse{Term: term, Success: true}
	}
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Suffrage: raft.Voter}, {ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Voter}, {ID: "n4", Suffrage: raft.Nonvoter},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	ls := &leaderState{term: 5, ctx: ctx, cancel: cancel}
	confirm := func(arrived time.Time, d time.Duration) error {
		c, stop := context.WithTimeout(context.Background(), d)
		defer stop()
		return a.confirm(c, ls, arrived, cfg, "n1", nil)
	}

	req, resp := ok(5)
	a.record("n2", t0.Add(-time.Millisecond), req, resp) // sent before the read
	a.record("n4", t0.Add(time.Millisecond), req, resp)  // not a voter
	refusedReq, refused := ok(5)
	refused.Success = false
	a.record("n3", t0.Add(time.Millisecond), refusedReq, refused)
	newerReq, newer := ok(5)
	newer.Term = 6 // a refusal from a newer term, flagged as success
	a.record("n3", t0.Add(time.Millisecond), newerReq, newer)
	if err := confirm(t0, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("confirmed with no fresh acceptance from a voter: %v", err)
	}

	// A fresh acceptance wakes the wait.
	done := make(chan error, 1)
	go func() { done <- confirm(t0, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	a.record("n3", t0.Add(2*time.Millisecond), req, resp)
	if err := <-done; err != nil {
		t.Fatalf("a quorum (n1, n3) accepted after the read arrived: %v", err)
	}

	// A late answer from term 4, sent later, does not replace n3's.
	oldReq, oldResp := ok(4)
	a.record("n3", t0.Add(3*time.Millisecond), oldReq, oldResp)
	if err := confirm(t0, 50*time.Millisecond); err != nil {
		t.Fatalf("an older term's late answer replaced a newer acceptance: %v", err)
	}

	// The term ends: the wait ends with it.
	go func() { done <- confirm(t0.Add(time.Hour), 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, errLeadershipEnded) {
		t.Fatalf("after the term ended: %v, want errLeadershipEnded", err)
	}
}
