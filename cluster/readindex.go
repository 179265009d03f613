package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// readIndex makes a read linearizable: note the commit index, confirm that
// no newer leader existed when the read arrived, then wait until that index
// has applied. It returns the state's index then (waitApplied's floor):
// the read must answer from state at least as new (stateMachine.readAt).
// A leader serves nothing before its term's barrier has applied (lead is
// set only after it).
//
// Confirming takes a quorum of voters that accepted, in this term, an
// append or heartbeat this node sent after the read arrived: a voter that
// did had not voted in a newer term by then, so no newer leader could have
// been elected, nor have committed anything, before the read arrived.
// raft.VerifyLeader alone is not that: it counts any "yes" that reaches
// the leader after the check began, also an answer to a request sent
// before the read arrived. A leader paused (SIGSTOP, a GC, a frozen VM)
// past an election finds such answers waiting in its sockets when it
// resumes, sent by followers that have since elected someone else, and
// VerifyLeader succeeded on them (TestLeaderConfirmsAReadOnlyWithAnswersSentAfterIt).
// VerifyLeader still runs: it sends the heartbeats whose answers confirm.
func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	ls := n.lead.Load()
	if ls == nil {
		return 0, n.notLeader()
	}
	arrived := time.Now()
	idx := n.raft.CommitIndex()
	if err := n.await(ctx, n.raft.VerifyLeader()); err != nil {
		switch {
		case errors.Is(err, ErrStopped) || ctx.Err() != nil:
			return 0, err
		case errors.Is(err, raft.ErrLeadershipLost):
			// raft answers a pending check so when it steps down. A
			// read changed nothing, so its outcome is not unknown: the
			// node is no longer the leader.
			return 0, n.notLeader()
		}
		return 0, n.raftError(err)
	}
	if err := n.acks.confirm(ctx, ls, arrived, n.raft.GetConfiguration().Configuration(), n.cfg.ID, n.stopCh); err != nil {
		if errors.Is(err, errLeadershipEnded) {
			return 0, n.notLeader()
		}
		return 0, err
	}
	// This node counted itself: it too must still be in the term, so
	// that it had not voted in a newer one when the read arrived (lead is
	// cleared only after raft has stepped down).
	if n.raft.CurrentTerm() != ls.term {
		return 0, n.notLeader()
	}
	return n.waitApplied(ctx, idx)
}

// waitApplied blocks until this node's state machine has applied every
// entry up to idx. raft's applied index is not that: raft counts an entry
// when it hands it to the state machine's goroutine, before it is applied
// (and a leader applies only once its own log holds the entry), so a read
// that took raft's word answered from state without an entry committed
// before the read arrived (TestAReadWaitsForTheStateMachineNotRaftsAppliedIndex).
// But raft never hands over a no-op or a barrier, nor applies a
// configuration through Apply: after the state machine's last command,
// entries up to idx that are none count as applied once raft counts them.
//
// It returns the state's index when the wait ended, the floor a read's
// answer must be copied at or above (stateMachine.readAt): after no-ops
// and barriers that index is below idx.
func (n *Node) waitApplied(ctx context.Context, idx uint64) (uint64, error) {
	var cmd uint64 // appliedThrough's
	for {
		ch := n.sm.appliedChanged()
		if floor, ok := n.sm.appliedThrough(idx, n.raft.AppliedIndex(), &cmd); ok {
			return floor, nil
		}
		if n.planted(BugReadRaftApplied) && n.raft.AppliedIndex() >= idx {
			return 0, nil
		}
		if errp := n.sm.failed.Load(); errp != nil {
			// The state machine stopped at an entry it could not apply:
			// it will never reach idx, and the node is stopping.
			return 0, ErrStopped
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Millisecond): // raft counts a no-op or barrier without an apply
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-n.stopCh:
			return 0, ErrStopped
		}
	}
}

// errLeadershipEnded: the term whose leadership a read was confirming
// ended first.
var errLeadershipEnded = errors.New("cluster: leadership ended while confirming a read")

// peerAcks records, per peer, the newest append or heartbeat it accepted
// in the term it was sent in, and when that request was sent (this node's
// monotonic clock). The transport reports every answer (record) before
// raft sees it, so when VerifyLeader succeeds on fresh answers, they are
// already here.
type peerAcks struct {
	mu   sync.Mutex
	last map[raft.ServerID]ack
	// wake is closed and cleared by the next record; nil while nobody
	// waits.
	wake chan struct{}
}

type ack struct {
	term uint64
	sent time.Time
}

func newPeerAcks() *peerAcks { return &peerAcks{last: map[raft.ServerID]ack{}} }

// record notes an answered AppendEntries sent at sent (transport's
// Config.OnAppendEntries). Only an acceptance in the request's own term
// counts: a refusal may come from a peer in a newer term.
func (a *peerAcks) record(peer raft.ServerID, sent time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if !resp.Success || resp.Term != req.Term {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.last[peer]; ok && (prev.term > req.Term || prev.term == req.Term && !sent.After(prev.sent)) {
		return // a late answer does not replace a newer one
	}
	a.last[peer] = ack{term: req.Term, sent: sent}
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
	}
}

// confirm waits until a quorum of cfg's voters (self counts as one when a
// voter) accepted, in ls's term, a request sent at or after arrived. It
// fails with errLeadershipEnded when ls's term ends first, with ctx's error
// or ErrStopped.
func (a *peerAcks) confirm(ctx context.Context, ls *leaderState, arrived time.Time, cfg raft.Configuration, self string, stop <-chan struct{}) error {
	for {
		a.mu.Lock()
		voters, yes := 0, 0
		for _, s := range cfg.Servers {
			if s.Suffrage != raft.Voter {
				continue
			}
			voters++
			if string(s.ID) == self {
				yes++
			} else if k, ok := a.last[s.ID]; ok && k.term == ls.term && !k.sent.Before(arrived) {
				yes++
			}
		}
		if yes > voters/2 {
			a.mu.Unlock()
			return nil
		}
		if a.wake == nil {
			a.wake = make(chan struct{})
		}
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-wake:
		case <-ls.ctx.Done():
			return errLeadershipEnded
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrStopped
		}
	}
}
