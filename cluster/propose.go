package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// proposal is one command waiting to be grouped into a Raft entry.
type proposal struct {
	ctx  context.Context
	at   time.Time // arrival, for the propose latency metric
	cmd  *fsmpb.Command
	done chan proposalResult // buffered, receives exactly once
}

type proposalResult struct {
	res fsm.Result
	now int64
	err error
}

// propose hands cmd to the group-commit loop and waits for its outcome. It
// returns the command's fsm.Result (whose Err is a domain refusal, if any)
// or an error from the node: *NotLeaderError when this node cannot propose,
// ErrIndeterminate when the outcome is unknown.
func (n *Node) propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	if n.lead.Load() == nil {
		return fsm.Result{}, n.notLeader()
	}
	p := &proposal{ctx: ctx, at: time.Now(), cmd: cmd, done: make(chan proposalResult, 1)}
	select {
	case n.proposeCh <- p:
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-n.stopCh:
		return fsm.Result{}, ErrStopped
	}
	select {
	case r := <-p.done:
		return r.res, r.err
	case <-ctx.Done():
		// Handed to Raft: it may still commit.
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrIndeterminate, ctx.Err())
	case <-n.stopCh:
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrIndeterminate, ErrStopped)
	}
}

// proposeLoop is the group commit: it takes every proposal waiting (up to
// MaxBatch), stamps the batch with the leader's cluster time, read now,
// after all of them arrived, and appends it as one Raft entry. Entries are
// appended in stamp order; their commits are awaited concurrently so the
// next batch can form while one replicates.
func (n *Node) proposeLoop() {
	batch := make([]*proposal, 0, n.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case <-n.stopCh:
			// Answer whatever is still queued: never proposed, so a
			// definite failure.
			for {
				select {
				case p := <-n.proposeCh:
					p.done <- proposalResult{err: ErrStopped}
				default:
					return
				}
			}
		case p := <-n.proposeCh:
			batch = append(batch, p)
		}
	drain:
		for len(batch) < n.cfg.MaxBatch {
			select {
			case p := <-n.proposeCh:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		n.proposeBatch(batch)
	}
}

func (n *Node) proposeBatch(batch []*proposal) {
	live := make([]*proposal, 0, len(batch))
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- proposalResult{err: err} // never proposed: a definite failure
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	fail := func(err error) {
		for _, p := range live {
			p.done <- proposalResult{err: err}
		}
	}
	ls := n.lead.Load()
	if ls == nil {
		fail(n.notLeader())
		return
	}
	b := &fsmpb.Batch{
		NowNs:        ls.now(n.clock),
		SkewMarginNs: int64(n.cfg.SkewMargin),
		DedupKeepNs:  int64(n.cfg.MaxTTL + n.cfg.SkewMargin),
		// Refused request ids: a shorter window and a cap, so a storm of
		// refused polls cannot grow the state without bound.
		RefusalKeepNs: int64(n.cfg.RefusalKeep),
		MaxRefusals:   uint64(n.cfg.MaxRefusals),
		Commands:      make([]*fsmpb.Command, len(live)),
	}
	for i, p := range live {
		b.Commands[i] = p.cmd
	}
	data, err := fsm.EncodeBatch(b)
	if err != nil {
		fail(err)
		return
	}
	n.metrics.batchCommands.Observe(float64(len(live)))
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	go func() {
		if err := f.Error(); err != nil {
			fail(n.raftError(err))
			return
		}
		switch r := f.Response().(type) {
		case *fsm.Applied:
			done := time.Now()
			for i, p := range live {
				n.metrics.proposeSeconds.Observe(done.Sub(p.at).Seconds())
				p.done <- proposalResult{res: r.Results[i], now: r.Now}
			}
		case error:
			fail(fmt.Errorf("%w: %v", ErrFailed, r))
		default:
			fail(fmt.Errorf("%w: unexpected apply response %T", ErrFailed, r))
		}
	}()
}
