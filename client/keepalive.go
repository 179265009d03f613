package client

import (
	"bytes"
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// keeper renews every live lease of a client over one KeepAlive stream.
// Each lease is renewed every KeepAliveInterval (default ttl/3) from the
// send time of its last confirmed renewal; a renewal that failed is
// retried sooner. A lease has at most one renewal in flight on a stream:
// a stream delivers every answer while it lives, and sending again while
// the cluster is slow to answer would only lengthen its queue (when more
// renewals are asked for than the cluster can commit, resending every
// unanswered one made the backlog grow until leases expired). A refusal
// ends the lease at once; silence leaves it to end at its safe deadline.
// A broken stream is reopened on another node, and what was in flight on
// it is sent again there.
type keeper struct {
	c *Client

	mu     sync.Mutex
	leases map[ID]*Lease
	// abandoned holds the lease ids an Acquire gave up and releases, each
	// until its ttl has surely run out (c.clock): a concurrent Acquire of
	// the same request id must not hand one out (add refuses it).
	abandoned map[ID]time.Duration
	due       renewHeap // the leases in leases, earliest nextRenew first
	pending   map[uint64]pendingRenew
	seq       uint64
	wake      chan struct{}

	// stalled is a test hook: while set, no renewal is sent.
	stalled atomic.Bool

	sent, confirmed, refused, deferred, streams atomic.Uint64
	// lastRecv is the client clock reading of the stream's last answer (or
	// of its opening).
	lastRecv atomic.Int64
	// outstandingSince is when the stream last went from no renewal
	// outstanding to one (c.clock), guarded by mu. Every renewal sent
	// before it has been answered or forgotten with its stream.
	outstandingSince time.Duration
}

// Stats counts a client's keep-alive work since it was created.
type Stats struct {
	// Leases is the number of leases kept alive now.
	Leases int
	// RenewalsSent, RenewalsConfirmed and RenewalsRefused count keep-alive
	// renewals.
	RenewalsSent, RenewalsConfirmed, RenewalsRefused uint64
	// RenewalsDeferred counts renewals the leader refused for overload
	// (nothing proposed) and that were sent again after the wait it asked
	// for, never later than half the time left to the lease's safe
	// deadline.
	RenewalsDeferred uint64
	// Streams counts keep-alive streams opened (one, unless nodes failed).
	Streams uint64
}

// Stats returns the client's keep-alive counters.
func (c *Client) Stats() Stats {
	k := c.keeper
	k.mu.Lock()
	n := len(k.leases)
	k.mu.Unlock()
	return Stats{Leases: n, RenewalsSent: k.sent.Load(), RenewalsConfirmed: k.confirmed.Load(), RenewalsRefused: k.refused.Load(), RenewalsDeferred: k.deferred.Load(), Streams: k.streams.Load()}
}

type pendingRenew struct {
	l      *Lease
	sentAt time.Duration
}

// retryUnconfirmed is how soon a renewal that failed is sent again.
const retryUnconfirmed = 500 * time.Millisecond

// resendUnanswered is how long a renewal may go unanswered on a stream
// that answers others before it is sent again: a net under the rule of
// one renewal in flight per lease, should a node ever drop one answer.
// Well above the node's own bound on a renewal (5 s), so a slow cluster
// is not sent every renewal twice.
const resendUnanswered = 7 * time.Second

func newKeeper(c *Client) *keeper {
	return &keeper{c: c, leases: map[ID]*Lease{}, abandoned: map[ID]time.Duration{}, pending: map[uint64]pendingRenew{}, wake: make(chan struct{}, 1)}
}

func (k *keeper) interval(l *Lease) time.Duration {
	if k.c.cfg.KeepAliveInterval > 0 {
		return k.c.cfg.KeepAliveInterval
	}
	return l.ttl / 3
}

func (k *keeper) add(l *Lease, sentAt time.Duration) *Lease {
	k.mu.Lock()
	if kept := k.liveLocked(l.id); kept != nil {
		// The same lease id, acquired again under its request id: the
		// one kept alive stays the only one (two would share one entry
		// here, and the schedule would keep renewing the other's after
		// both ended).
		k.mu.Unlock()
		return kept
	}
	if k.abandonedLocked(l.id) {
		// Another Acquire of its request id gave it up and is releasing
		// it: never hand it out.
		k.mu.Unlock()
		return nil
	}
	l.nextRenew = sentAt + k.interval(l)
	k.leases[l.id] = l
	heap.Push(&k.due, dueEntry{at: l.nextRenew, l: l})
	k.mu.Unlock()
	k.poke()
	// Forget the lease when it ends for any reason.
	go func() {
		<-l.Done()
		k.remove(l)
	}()
	return l
}

// live returns the lease kept alive under id, if it has not ended.
func (k *keeper) live(id ID) *Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.liveLocked(id)
}

// abandon marks lease id as given up for ttl (the longest it can live
// on, from now) unless it is kept alive: then it reports false and the
// caller must not release it. Checked and marked in one step against add,
// so that no concurrent Acquire hands out a lease being released.
func (k *keeper) abandon(id ID, ttl time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.liveLocked(id) != nil {
		return false
	}
	now := k.c.clock.Now()
	for x, until := range k.abandoned { // few: only grants an Acquire gave up
		if until <= now {
			delete(k.abandoned, x)
		}
	}
	k.abandoned[id] = now + ttl
	return true
}

// abandonedLocked reports, with k.mu held, whether id was abandoned and
// may still be live.
func (k *keeper) abandonedLocked(id ID) bool {
	until, ok := k.abandoned[id]
	return ok && until > k.c.clock.Now()
}

// liveLocked is live with k.mu held.
func (k *keeper) liveLocked(id ID) *Lease {
	if kept := k.leases[id]; kept != nil && kept.ctx.Err() == nil {
		return kept
	}
	return nil
}

func (k *keeper) remove(l *Lease) {
	k.mu.Lock()
	if k.leases[l.id] == l {
		delete(k.leases, l.id)
		heap.Remove(&k.due, l.dueIdx)
	}
	k.mu.Unlock()
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keeper) endAll(err error) {
	k.mu.Lock()
	ls := make([]*Lease, 0, len(k.leases))
	for _, l := range k.leases {
		ls = append(ls, l)
	}
	k.mu.Unlock()
	for _, l := range ls {
		l.end(err)
	}
}

// watchdog ends leases whose safe deadline passed while the host was
// suspended. Lease timers run on Go's monotonic clock, which stops during
// suspend, so after a resume they fire late; the safe deadline is on the
// client's Clock (CLOCK_BOOTTIME), which does not stop. When the client
// clock has advanced more than the monotonic one, every lease is checked.
func (k *keeper) watchdog(ctx context.Context) {
	const period = 100 * time.Millisecond
	t := time.NewTicker(period)
	defer t.Stop()
	lastMono, lastClock := time.Now(), k.c.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mono, clk := time.Now(), k.c.clock.Now()
		if (clk-lastClock)-mono.Sub(lastMono) > period/2 {
			k.mu.Lock()
			ls := make([]*Lease, 0, len(k.leases))
			for _, l := range k.leases {
				ls = append(ls, l)
			}
			k.mu.Unlock()
			for _, l := range ls {
				l.checkDeadline()
			}
		}
		lastMono, lastClock = mono, clk
	}
}

// run keeps a stream open until ctx ends.
func (k *keeper) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		k.mu.Lock()
		idle := len(k.leases) == 0
		k.mu.Unlock()
		if idle {
			select {
			case <-k.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := k.session(ctx); err != nil && ctx.Err() == nil {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// session runs one stream until it breaks, ctx ends, or no lease is left.
func (k *keeper) session(ctx context.Context) error {
	addr, conn, err := k.c.endpoint()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer k.streamEnded()
	// Opening waits for the connection, which gRPC bounds only by its
	// connect timeout (20 s): a silent node gets RequestTimeout, as a
	// unary attempt does, and the client moves to whichever node leads.
	silent := time.AfterFunc(k.c.cfg.RequestTimeout, cancel)
	stream, err := api.NewLeaseServiceClient(conn).KeepAlive(metadata.AppendToOutgoingContext(sctx, api.HeaderKeepAliveHeartbeats, "1"))
	if !silent.Stop() && ctx.Err() == nil {
		k.c.relocate(ctx, addr)
		return status.Errorf(codes.Unavailable, "keep-alive: %s opened no stream within %v", addr, k.c.cfg.RequestTimeout)
	}
	if err != nil {
		k.c.failover(addr, err)
		return err
	}
	k.streams.Add(1)
	k.lastRecv.Store(int64(k.c.clock.Now()))
	recvErr := make(chan error, 1)
	go func() { recvErr <- k.receive(stream) }()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case err := <-recvErr:
			k.c.failover(addr, err)
			return err
		case <-ctx.Done():
			return nil
		case <-k.wake:
		case <-timer.C:
		}
		next, empty, err := k.sendDue(stream)
		if err == nil && k.silentFor() > 2*retryUnconfirmed {
			err = status.Error(codes.Unavailable, "keep-alive: no answer from the node")
		}
		if err != nil {
			k.c.failover(addr, err)
			return err
		}
		if empty {
			return nil // no lease left: close the stream until one comes
		}
		timer.Reset(max(next, time.Millisecond))
	}
}

// sendDue sends a renewal for every lease that is due and returns the time
// until the next one is. The lock is never held across a Send: a Send can
// block on flow control until the receiver (which takes the lock) drains.
func (k *keeper) sendDue(stream api.LeaseService_KeepAliveClient) (time.Duration, bool, error) {
	k.mu.Lock()
	if len(k.leases) == 0 {
		k.mu.Unlock()
		return 0, true, nil
	}
	now := k.c.clock.Now()
	var due []*api.KeepAliveRequest // messages, each with up to maxRenewalsPerMessage renewals
	stalled := k.stalled.Load()
	// Pop what is due (O(log n) each), never scanning every lease.
	for !stalled && len(k.due) > 0 && k.due[0].at <= now {
		l := k.due[0].l
		if l.renewing && now-l.renewSentAt < resendUnanswered {
			// Its renewal is still in the stream's queue: look again later.
			k.reschedule(l, now+retryUnconfirmed)
			continue
		}
		l.renewing, l.renewSentAt = true, now
		if len(k.pending) == 0 {
			k.outstandingSince = now
		}
		k.seq++
		k.pending[k.seq] = pendingRenew{l: l, sentAt: now}
		r := &api.KeepAliveRequest{LeaseId: l.id[:], Seq: k.seq}
		if last := len(due) - 1; last >= 0 && len(due[last].More) < maxRenewalsPerMessage-1 {
			due[last].More = append(due[last].More, r)
		} else {
			r.Brief = true // the client knows its leases: answers need not carry them
			due = append(due, r)
		}
		k.reschedule(l, now+min(k.interval(l), retryUnconfirmed))
	}
	next := time.Hour
	if len(k.due) > 0 {
		next = k.due[0].at - now
	}
	k.mu.Unlock()
	if stalled {
		next = min(next, 50*time.Millisecond)
	}
	for _, req := range due {
		if err := stream.Send(req); err != nil {
			return 0, false, err
		}
		k.sent.Add(uint64(1 + len(req.More)))
	}
	return next, false, nil
}

// maxRenewalsPerMessage is how many renewals sendDue packs into one
// message (the first and its more): one message, and one answer, for
// renewals due together instead of one each. Well under the node's bound
// of 4096 per message.
const maxRenewalsPerMessage = 1024

// maxFailedRenewals is how many renewals in a row may fail (Unavailable and
// the like) before the stream is moved to another node: the node this
// stream reaches may be cut off from the leader while others are not.
const maxFailedRenewals = 2

// silentFor returns how long the node has said nothing while a renewal
// was outstanding on this stream: the time since the later of its last
// answer and the send of the oldest renewal still outstanding (zero when
// none is). A slow but answering node is not silent, and neither is an
// idle stream that has just been sent a renewal: silence counted from the
// last answer alone made every renewal after an idle spell look
// unanswered, so the stream was closed and the renewal sent twice.
//
// The oldest outstanding renewal is never sent before outstandingSince,
// and one sent after it is outstanding only if an answer came since (an
// entry leaves pending only on an answer or with its stream), so the later
// of lastRecv and outstandingSince is the later of lastRecv and the oldest
// outstanding send, found without scanning pending.
func (k *keeper) silentFor() time.Duration {
	k.mu.Lock()
	outstanding, since := len(k.pending) > 0, k.outstandingSince
	k.mu.Unlock()
	if !outstanding {
		return 0
	}
	if k.c.cfg.Testing.planted(BugSilenceFromLastAnswer) {
		since = 0
	}
	return k.c.clock.Now() - max(time.Duration(k.lastRecv.Load()), since)
}

// streamEnded forgets the renewals in flight on a stream that ended: their
// answers can no longer arrive, so they are sent again, first thing, on
// the next one.
func (k *keeper) streamEnded() {
	k.mu.Lock()
	now := k.c.clock.Now()
	for _, p := range k.pending {
		l := p.l
		l.renewing = false
		if k.leases[l.id] == l && l.nextRenew > now {
			k.reschedule(l, now)
		}
	}
	clear(k.pending)
	k.mu.Unlock()
}

func (k *keeper) receive(stream api.LeaseService_KeepAliveClient) error {
	failed := 0
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		now := k.c.clock.Now() // one reading for the message's answers
		k.lastRecv.Store(int64(now))
		if heartbeat(msg) {
			continue // the node is there, its commits are slow: not silent
		}
		var moveErr error
		for i := -1; i < len(msg.More); i++ {
			resp := msg
			if i >= 0 {
				resp = msg.More[i]
			}
			if c := codes.Code(resp.Code); c == codes.ResourceExhausted {
				// The leader answered, busy: not a reason to move the stream.
			} else if c != codes.OK && c != codes.NotFound {
				if failed++; failed >= maxFailedRenewals && moveErr == nil {
					moveErr = status.Errorf(codes.Unavailable, "keep-alive: %d renewals in a row failed: %s", failed, resp.Message)
				}
			} else {
				failed = 0
			}
			// Every answer of the message is taken, the renewals that
			// failed before it too: they are no less confirmed.
			if !k.answered(resp, now) && moveErr == nil {
				moveErr = status.Errorf(codes.Unavailable, "keep-alive: the answer to renewal %d names another lease", resp.Seq)
			}
		}
		if moveErr != nil {
			return moveErr
		}
	}
}

// heartbeat reports whether msg is a node's empty answer (seq 0, which no
// renewal has) sent while renewals are slow to commit: it says the node is
// there, and answers nothing.
func heartbeat(msg *api.KeepAliveResponse) bool {
	return msg.Seq == 0 && len(msg.LeaseId) == 0 && msg.Code == 0 && len(msg.More) == 0
}

// answered takes the answer to one renewal, received at now. It reports
// false, taking nothing, for an answer under a renewal's seq that names
// another lease: a broken node or relay, whose stream is to be left (the
// renewal is sent again on the next).
func (k *keeper) answered(resp *api.KeepAliveResponse, now time.Duration) bool {
	k.mu.Lock()
	p, ok := k.pending[resp.Seq]
	if ok && !bytes.Equal(resp.LeaseId, p.l.id[:]) {
		k.mu.Unlock()
		return false
	}
	delete(k.pending, resp.Seq)
	if ok {
		p.l.renewing = false
	}
	k.mu.Unlock()
	if !ok {
		return true
	}
	switch codes.Code(resp.Code) {
	case codes.OK:
		k.confirmed.Add(1)
		if p.l.confirmAt(p.sentAt, resp.TtlRemaining.AsDuration(), now) {
			k.mu.Lock()
			if k.leases[p.l.id] == p.l { // this lease, not a later one under its id
				k.reschedule(p.l, p.sentAt+k.interval(p.l))
			}
			k.mu.Unlock()
			k.poke()
		}
	case codes.NotFound:
		k.refused.Add(1)
		p.l.end(ErrLeaseLost)
	case codes.ResourceExhausted:
		k.deferred.Add(1)
		k.deferRenewal(p.l, resp.RetryAfter.AsDuration())
	default:
		// Unavailable and the like: the renewal may be retried; the
		// lease ends at its safe deadline unless one is confirmed.
	}
	return true
}

// deferRenewal schedules the renewal of l that the leader refused for
// overload again after the wait it asked for (jittered), but never later
// than half the time left to l's safe deadline, so a busy leader is asked
// again, and more often as the deadline nears, while the lease can still
// be kept. A lease past its deadline ends as it always does.
func (k *keeper) deferRenewal(l *Lease, hint time.Duration) {
	l.mu.Lock()
	safe := l.safeUntil
	l.mu.Unlock()
	k.mu.Lock()
	if k.leases[l.id] != l {
		k.mu.Unlock()
		return
	}
	now := k.c.clock.Now()
	wait := min(overloadWait(hint), (safe-now)/2)
	k.reschedule(l, now+max(wait, 10*time.Millisecond))
	k.mu.Unlock()
	k.poke() // the sender may be asleep until a later renewal
}

// reschedule makes l, a lease in k.due, due at at. k.mu is held.
func (k *keeper) reschedule(l *Lease, at time.Duration) {
	l.nextRenew = at
	k.due[l.dueIdx].at = at
	heap.Fix(&k.due, l.dueIdx)
}

// renewHeap orders leases by nextRenew, kept in each entry beside the
// lease so that ordering reads one array, not every lease (Less on the
// leases themselves was a tenth of a client renewing 100 000 leases); each
// lease knows its index.
type renewHeap []dueEntry

type dueEntry struct {
	at time.Duration // l.nextRenew
	l  *Lease
}

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].l.dueIdx, h[j].l.dueIdx = i, j
}
func (h *renewHeap) Push(x any) { e := x.(dueEntry); e.l.dueIdx = len(*h); *h = append(*h, e) }
func (h *renewHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*h = old[:len(old)-1]
	e.l.dueIdx = -1
	return e
}
