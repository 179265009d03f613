package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// proposal is one command waiting to be grouped into a Raft entry.
type proposal struct {
	ctx   context.Context
	at    time.Time // arrival, for the propose latency metric
	cmd   *fsmpb.Command
	class admitClass
	done  chan struct{} // closed once res is set (by finish, exactly once)
	res   proposalResult

	// A renewal others may ride on (coalesce): key is its lease id. It is
	// dropped unproposed when every caller waiting on it has left before
	// it was sealed into a batch (waiters == 0). waiters and sealed are
	// guarded by admission.mu.
	keyed   bool
	key     [fsm.LeaseIDLen]byte
	waiters int
	sealed  bool
}

type proposalResult struct {
	res fsm.Result
	now int64
	err error
}

// admitClass is what a command may cost if refused, which decides the
// budget it is admitted against.
type admitClass int

const (
	// classInternal: the leader's own commands (time ticks); never refused.
	classInternal admitClass = iota
	// classHeld: renewals and releases of held leases. A refused renewal
	// can cost a live lease: the larger budget, Config.MaxPending.
	classHeld
	// classGrant: new grants. A refused grant costs nothing: the smaller
	// budget, Config.MaxPendingGrants. Its own, so renewals cannot starve
	// grants for good either.
	classGrant
	// classUrgent: renewals of leases with less than a third of their ttl
	// left (urgentRenewal) when classHeld's budget is spent: a budget of
	// their own, Config.MaxPending.
	// Admission by arrival alone lost 36 of 100 000 leases kept alive
	// under 3x overload: the retries of a few leases kept meeting a full
	// queue until their deadline passed. Keeping every lease alive needs
	// only about leases / ttl renewals a second, far below capacity, so
	// the few that are running out go first.
	classUrgent
)

func classOf(cmd *fsmpb.Command) admitClass {
	switch cmd.Op.(type) {
	case *fsmpb.Command_Acquire:
		return classGrant
	case *fsmpb.Command_Renew, *fsmpb.Command_Release:
		return classHeld
	}
	return classInternal
}

// admission is the leader's bound on client work, and its index of the
// renewals not yet sealed into a batch (so a second renewal of the same
// lease rides on the first instead of adding a command).
//
// Invariant: pending[c] counts the client commands of class c admitted
// and not yet finished; every one of them is in proposeCh, in a batch
// being formed, or in Raft. proposeCh has room for both budgets plus the
// leader's own commands, so an admitted command never waits to enter it.
type admission struct {
	pending [classUrgent + 1]atomic.Int64
	// latency is a moving average of arrival → answer (ns): about how long
	// the queue takes to drain, the retry hint of a refusal.
	latency atomic.Int64

	mu       sync.Mutex
	renewals map[[fsm.LeaseIDLen]byte]*proposal // unsealed keyed renewals
}

func newAdmission() *admission {
	return &admission{renewals: map[[fsm.LeaseIDLen]byte]*proposal{}}
}

// Bounds of the retry hint sent with a refusal.
const (
	minRetryHint = 50 * time.Millisecond
	maxRetryHint = 2 * time.Second
)

// admit counts a command of class in, unless its budget is spent.
func (n *Node) admit(class admitClass) error {
	if class == classInternal {
		return nil
	}
	if cur, limit, ok := n.take(class); !ok {
		n.metrics.admissionRefused(class)
		return &OverloadedError{Pending: int(cur), Limit: int(limit), RetryAfter: n.retryHint()}
	}
	return nil
}

// admitRenewal admits p, a renewal, on the held budget or, when that is
// spent and its lease is running out (urgent), on the urgent one.
func (n *Node) admitRenewal(p *proposal, urgent bool) error {
	if !urgent {
		return n.admit(classHeld)
	}
	if _, _, ok := n.take(classHeld); ok {
		return nil
	}
	if err := n.admit(classUrgent); err != nil {
		return err
	}
	p.class = classUrgent
	return nil
}

// take counts one command of class in if its budget has room; otherwise
// it returns the count and the limit.
func (n *Node) take(class admitClass) (cur, limit int64, ok bool) {
	limit = int64(n.cfg.MaxPending) // classHeld, classUrgent
	if class == classGrant {
		limit = int64(n.cfg.MaxPendingGrants)
	}
	c := &n.adm.pending[class]
	for {
		cur = c.Load()
		if cur >= limit {
			return cur, limit, false
		}
		if c.CompareAndSwap(cur, cur+1) {
			return cur + 1, limit, true
		}
	}
}

// urgentRenewal reports whether the lease id has less than a third of its
// ttl left, and some left, at the leader's cluster time now: its renewal
// may use the urgent budget (classUrgent) when the held one is spent.
func (n *Node) urgentRenewal(id [fsm.LeaseIDLen]byte) bool {
	ls := n.lead.Load()
	if ls == nil {
		return false
	}
	now := ls.now(n.clock)
	urgent := false
	n.sm.read(func(st *fsm.State) {
		if l, ok := st.LeaseByID(id); ok {
			left := l.ExpiresAt - now
			urgent = left > 0 && left*3 < l.TTL
		}
	})
	return urgent
}

// retryHint is how long a refused caller should wait: about the time the
// admitted queue takes to drain now.
func (n *Node) retryHint() time.Duration {
	return min(max(time.Duration(n.adm.latency.Load()), minRetryHint), maxRetryHint)
}

// finish answers p: once, for every caller waiting on it.
func (n *Node) finish(p *proposal, r proposalResult) {
	if p.keyed {
		n.adm.mu.Lock()
		if n.adm.renewals[p.key] == p {
			delete(n.adm.renewals, p.key)
		}
		p.sealed = true
		n.adm.mu.Unlock()
	}
	if p.class != classInternal {
		n.adm.pending[p.class].Add(-1)
	}
	p.res = r
	close(p.done)
}

// propose hands cmd to the group-commit loop and waits for its outcome. It
// returns the command's fsm.Result (whose Err is a domain refusal, if any)
// or an error from the node: *NotLeaderError when this node cannot propose,
// *OverloadedError when its admission budget for cmd's class is spent
// (nothing proposed), ErrIndeterminate when the outcome is unknown.
// A renewal goes through proposeRenewal.
func (n *Node) propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	if r := cmd.GetRenew(); r != nil && len(r.LeaseId) == fsm.LeaseIDLen {
		p, err := n.proposeRenewal([fsm.LeaseIDLen]byte(r.LeaseId), cmd)
		if err != nil {
			return fsm.Result{}, err
		}
		return n.awaitProposal(ctx, p)
	}
	if n.lead.Load() == nil {
		return fsm.Result{}, n.notLeader()
	}
	class := classOf(cmd)
	if err := n.admit(class); err != nil {
		return fsm.Result{}, err
	}
	p := &proposal{ctx: ctx, at: time.Now(), cmd: cmd, class: class, done: make(chan struct{})}
	if err := n.enqueue(p); err != nil {
		return fsm.Result{}, err
	}
	return n.awaitProposal(ctx, p)
}

// proposeRenewal hands cmd, a renewal of the lease key, to the group-commit
// loop without waiting for its outcome, and returns the proposal that
// carries it: cmd's own, or the renewal of the same lease already waiting
// for a batch, which cmd then rides on. The caller is one of the
// proposal's waiters and must await it (awaitProposal, or p.done then
// p.res) or leave it (abandon). Errors are propose's: nothing proposed.
//
// Riding is sound because the ride is taken before the batch is sealed,
// and the batch's stamp is read after sealing, so the stamp still follows
// every rider's arrival.
func (n *Node) proposeRenewal(key [fsm.LeaseIDLen]byte, cmd *fsmpb.Command) (*proposal, error) {
	if n.lead.Load() == nil {
		return nil, n.notLeader()
	}
	// Only while the held budget is spent (a hint: admitRenewal decides),
	// and before adm.mu: the state's lock may wait out an apply, and
	// renewals need not pay for it when nothing is refused.
	urgent := n.adm.pending[classHeld].Load() >= int64(n.cfg.MaxPending) && n.urgentRenewal(key)
	n.adm.mu.Lock()
	q := n.adm.renewals[key]
	if q != nil && q.waiters == 0 {
		// Every caller of q left: the batch will drop it unproposed. Take
		// its place.
		delete(n.adm.renewals, key)
		q = nil
	}
	if q != nil {
		q.waiters++
		n.adm.mu.Unlock()
		n.metrics.renewalsCoalesced.Inc()
		return q, nil
	}
	// A keyed renewal's ctx never ends: it is dropped unproposed when
	// every waiter has left before it was sealed (waiters == 0).
	p := &proposal{ctx: context.Background(), at: time.Now(), cmd: cmd, class: classHeld, done: make(chan struct{}),
		keyed: true, key: key, waiters: 1}
	if err := n.admitRenewal(p, urgent); err != nil {
		n.adm.mu.Unlock()
		return nil, err
	}
	n.adm.renewals[key] = p
	n.adm.mu.Unlock()
	if err := n.enqueue(p); err != nil {
		return nil, err
	}
	return p, nil
}

// enqueue hands an admitted proposal to the group-commit loop.
func (n *Node) enqueue(p *proposal) error {
	select {
	case n.proposeCh <- p: // never blocks for an admitted command (see admission)
		if n.fullBatchWaiting() {
			select {
			case n.batchFull <- struct{}{}:
			default:
			}
		}
		return nil
	case <-n.stopCh:
		n.finish(p, proposalResult{err: ErrStopped})
		return ErrStopped
	}
}

// awaitProposal waits for p's outcome on behalf of one caller. An outcome
// already known is returned even when ctx has ended.
func (n *Node) awaitProposal(ctx context.Context, p *proposal) (fsm.Result, error) {
	select {
	case <-p.done:
		return p.res.res, p.res.err
	default:
	}
	select {
	case <-p.done:
		return p.res.res, p.res.err
	case <-ctx.Done():
		n.abandon(p)
		// Handed to Raft, or may still be: it may commit.
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrIndeterminate, ctx.Err())
	case <-n.stopCh:
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrIndeterminate, ErrStopped)
	}
}

// abandon says one waiter of p stopped waiting for its outcome. A keyed
// renewal that nobody waits for any more is dropped unproposed if it has
// not been sealed into a batch yet.
func (n *Node) abandon(p *proposal) {
	if p.keyed {
		n.adm.mu.Lock()
		p.waiters--
		n.adm.mu.Unlock()
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
					n.finish(p, proposalResult{err: ErrStopped})
				default:
					return
				}
			}
		case p := <-n.proposeCh:
			batch = append(batch, p)
		}
		slot, ok := n.awaitSlot()
		if !ok {
			n.finish(batch[0], proposalResult{err: ErrStopped})
			continue
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
		if !n.proposeBatch(batch, slot) && slot {
			<-n.inflight
		}
	}
}

// awaitSlot waits until no other entry of the group commit is in Raft
// (slot: this one takes the token, and gives it back when it has applied),
// or until a full batch (MaxBatch) is waiting, which goes at once without
// the token. ok is false when the node stops.
//
// One entry in flight at a time, while the next batch forms: with the
// leader's and the followers' log syncs on the critical path, fewer and
// larger entries serve more commands than many small ones queued behind
// each other's syncs (docs/PERFORMANCE.md, "One entry in flight"). A
// backlog of full batches still pipelines.
func (n *Node) awaitSlot() (slot, ok bool) {
	for !n.fullBatchWaiting() {
		select {
		case n.inflight <- struct{}{}:
			return true, true
		case <-n.batchFull: // look again: it may have gone since
		case <-n.stopCh:
			return false, false
		}
	}
	return false, true
}

// fullBatchWaiting reports whether a full batch (MaxBatch) waits for the
// loop, counting the one proposal it may hold while it waits for a slot.
func (n *Node) fullBatchWaiting() bool { return len(n.proposeCh)+1 >= n.cfg.MaxBatch }

// proposeBatch seals batch and hands it to Raft as one entry; handed is
// false when nothing went to Raft. With slot, the entry gives the in-flight
// token back once it has applied or failed.
func (n *Node) proposeBatch(batch []*proposal, slot bool) (handed bool) {
	live := make([]*proposal, 0, len(batch))
	var dropped []*proposal
	// Seal: from here no renewal rides on these any more, so the stamp
	// read below follows the arrival of every caller they answer.
	n.adm.mu.Lock()
	for _, p := range batch {
		if p.keyed {
			if n.adm.renewals[p.key] == p {
				delete(n.adm.renewals, p.key)
			}
			p.sealed = true
			if p.waiters == 0 {
				dropped = append(dropped, p)
				continue
			}
		} else if p.ctx.Err() != nil {
			dropped = append(dropped, p)
			continue
		}
		live = append(live, p)
	}
	n.adm.mu.Unlock()
	for _, p := range dropped {
		// Never proposed: a definite failure, for nobody or a caller
		// that has left.
		err := p.ctx.Err()
		if err == nil {
			err = context.Canceled // a keyed renewal every waiter left
		}
		n.finish(p, proposalResult{err: err})
	}
	if len(live) == 0 {
		return false
	}
	fail := func(err error) {
		for _, p := range live {
			n.finish(p, proposalResult{err: err})
		}
	}
	ls := n.lead.Load()
	if ls == nil {
		fail(n.notLeader())
		return false
	}
	b := &fsmpb.Batch{
		NowNs:        ls.now(n.clock),
		SkewMarginNs: int64(n.cfg.SkewMargin),
		// A grant's request id is kept while its lease may live (max ttl
		// + skew margin) and at least as long as a client may retry it
		// (RefusalKeep, which must cover that): a short max ttl must not
		// let a late retry take a second token for one request.
		DedupKeepNs: int64(max(n.cfg.MaxTTL+n.cfg.SkewMargin, n.cfg.RefusalKeep)),
		// Refused request ids: a shorter window and a cap, so a storm of
		// refused polls cannot grow the state without bound.
		RefusalKeepNs: int64(n.cfg.RefusalKeep),
		MaxRefusals:   uint64(n.cfg.MaxRefusals),
		Commands:      make([]*fsmpb.Command, len(live)),
	}
	for i, p := range live {
		b.Commands[i] = p.cmd
	}
	sealed := time.Now()
	data, err := fsm.EncodeBatch(b)
	if err != nil {
		fail(err)
		return false
	}
	n.metrics.batchCommands.Observe(float64(len(live)))
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	go func() {
		if slot {
			defer func() { <-n.inflight }()
		}
		if err := f.Error(); err != nil {
			fail(n.raftError(err))
			return
		}
		switch r := f.Response().(type) {
		case *appliedEntry:
			done := time.Now()
			st := n.metrics.stages
			st.commit.Observe(r.start.Sub(sealed).Seconds())
			st.apply.Observe(r.end.Sub(r.start).Seconds())
			st.answer.Observe(done.Sub(r.end).Seconds())
			for i, p := range live {
				st.queue.Observe(sealed.Sub(p.at).Seconds())
				n.metrics.proposeSeconds.Observe(done.Sub(p.at).Seconds())
				n.finish(p, proposalResult{res: r.Results[i], now: r.Now})
			}
			// A moving average (1/8) of the batch's oldest wait: lossy
			// under concurrent batches, which a hint can afford.
			lat := int64(done.Sub(live[0].at))
			old := n.adm.latency.Load()
			n.adm.latency.Store(old + (lat-old)/8)
		case error:
			if errors.Is(r, ErrIndeterminate) {
				fail(r) // committed, not applied here (stateMachine.Apply)
				return
			}
			// Committed, so a replica that can apply it may still do
			// so: its outcome is unknown, not a failure.
			fail(fmt.Errorf("%w: log entry committed, but this node could not apply it (%w: %v)", ErrIndeterminate, ErrFailed, r))
		default:
			fail(fmt.Errorf("%w: unexpected apply response %T", ErrFailed, r))
		}
	}()
	return true
}
