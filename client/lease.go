package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

// ID identifies a lease. It is a capability (whoever has it may renew or
// release) and carries no order: never use it for fencing.
type ID [16]byte

// String returns the id in its one text form (api.FormatLeaseID: base64,
// as grpcurl, leasectl and the node's logs show it).
func (id ID) String() string { return api.FormatLeaseID(id[:]) }

// ParseID parses the form String returns, or the 32 hex digits of older
// releases (api.ParseLeaseID).
func ParseID(s string) (ID, error) {
	var id ID
	b, err := api.ParseLeaseID(s)
	if err != nil {
		return id, fmt.Errorf("client: %w", err)
	}
	copy(id[:], b)
	return id, nil
}

// Lease is a granted lease, kept alive by the client until it is released,
// lost, or its safe deadline passes without a confirmed renewal. Its
// methods are safe for concurrent use.
type Lease struct {
	c        *Client
	id       ID
	resource string
	scope    string
	holder   string
	token    uint64
	ttl      time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	safeUntil time.Duration // on c.clock
	lastSent  time.Duration // send time of the last confirmed grant or renewal
	timer     *time.Timer
	err       error

	// keep-alive bookkeeping, guarded by keeper.mu
	nextRenew time.Duration
	dueIdx    int
	renewing  bool // a renewal is in flight on the current stream
	// renewSentAt is when the renewal in flight was sent (c.clock).
	renewSentAt time.Duration
}

// ID returns the lease id.
func (l *Lease) ID() ID { return l.id }

// Resource returns the leased resource.
func (l *Lease) Resource() string { return l.resource }

// Scope returns the fencing scope the token was drawn from.
func (l *Lease) Scope() string { return l.scope }

// Holder returns the holder label.
func (l *Lease) Holder() string { return l.holder }

// Token returns the fencing token: pass it with every effect. It never
// changes over the lease's life; renewal keeps it.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// SafeUntil returns the instant until which this process may assume it
// holds the lease: the send time of the last confirmed grant or renewal,
// plus the ttl remaining the cluster reported, shrunk by the drift bound,
// minus the client margin. Done closes no later than this.
func (l *Lease) SafeUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Add(l.safeUntil - l.c.clock.Now())
}

// Done is closed when the lease ends: released, refused on renewal, safe
// deadline passed, or client closed, whichever comes first.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when Done closes; bound work under the lease by it.
// context.Cause(ctx) says why.
func (l *Lease) Context() context.Context { return l.ctx }

// Err returns nil while the lease lives, then why it ended: ErrReleased,
// ErrLeaseLost, ErrSafeDeadline or ErrClosed.
func (l *Lease) Err() error {
	l.checkDeadline() // the timer may be late after a host suspend
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release frees the resource at once and ends the lease. It is idempotent;
// releasing a lease that already ended only tells the cluster. When an
// attempt may have reached the leader and no answer said whether it
// released, it fails with ErrIndeterminate: the lease has ended here
// either way, and calling Release again is the retry.
func (l *Lease) Release(ctx context.Context) error {
	l.c.keeper.remove(l)
	l.end(ErrReleased)
	return l.c.change(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := api.NewLeaseServiceClient(conn).Release(ctx, &api.ReleaseRequest{LeaseId: l.id[:]})
		return err
	})
}

// confirm records a grant or renewal sent at sentAt whose response said
// remaining ttl was left, and moves the safe deadline (never backwards).
// It reports whether the lease is still live.
func (l *Lease) confirm(sentAt, remaining time.Duration) bool {
	return l.confirmAt(sentAt, remaining, l.c.clock.Now())
}

// confirmAt is confirm with the client clock read at or after the answer
// arrived (now): the keep-alive stream reads it once for the many answers
// of one message.
func (l *Lease) confirmAt(sentAt, remaining, now time.Duration) bool {
	cfg := &l.c.cfg
	drift, margin := cfg.Drift, cfg.Margin
	if k := &cfg.Testing; k.planted(BugSentAtOnAnswer) {
		sentAt = l.c.clock.Now()
	}
	if k := &cfg.Testing; k.planted(BugFullTTL) {
		remaining = l.ttl
	}
	if k := &cfg.Testing; k.planted(BugNoDrift) {
		drift = 0
	}
	if k := &cfg.Testing; k.planted(BugZeroMargin) {
		margin = 0
	}
	if l.ttl > 0 {
		// No answer can leave more than the lease's ttl: one that says so
		// (a misbehaving node) must not stretch the safe window.
		remaining = min(remaining, l.ttl)
	}
	safe := sentAt + time.Duration(float64(remaining)*(1-drift)) - margin
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false
	}
	if safe > l.safeUntil {
		l.safeUntil = safe
	}
	if sentAt > l.lastSent {
		l.lastSent = sentAt
	}
	wait := l.safeUntil - now
	if wait <= 0 {
		l.endLocked(ErrSafeDeadline)
		return false
	}
	// The timer is armed for the earlier deadline, and safeUntil never
	// moves back: when it fires, checkDeadline re-arms it for the one set
	// since. Not re-armed on every renewal: at 100 000 renewals a second a
	// Reset each was a tenth of the client's time.
	if l.timer == nil {
		l.timer = time.AfterFunc(wait, l.checkDeadline)
	}
	return true
}

// checkDeadline ends the lease if its safe deadline has passed on the
// client's clock (which counts suspend), or re-arms the timer.
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if wait := l.safeUntil - l.c.clock.Now(); wait > 0 {
		if l.timer != nil {
			l.timer.Reset(wait)
		}
		return
	}
	l.endLocked(ErrSafeDeadline)
}

func (l *Lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(err)
}

func (l *Lease) endLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.timer != nil {
		l.timer.Stop()
	}
	l.cancel(err)
}

// Acquire grants a lease on resource. A held resource fails with a
// *HeldError (errors.Is ErrHeld) unless WithWait is given. The call is
// retried on other nodes with the same request id, so a retry never yields
// a second lease. The lease is kept alive until Release, loss, or Close.
// Acquire never returns a lease whose safe window has already closed: when
// the answer comes too late (a slow network, a paused process) it releases
// that lease and fails with ErrSafeDeadline; acquire again, under a new
// request id. A waiting Acquire (WithWait) confirms its grant with one
// renewal; when that is refused or unanswered, it releases the grant and
// fails with ErrLeaseLost; when it is answered too late, with
// ErrSafeDeadline.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...AcquireOption) (*Lease, error) {
	o := acquireOptions{ttl: DefaultTTL}
	for _, f := range opts {
		f(&o)
	}
	if o.requestID == "" {
		o.requestID = newRequestID()
	}
	req := &api.AcquireRequest{
		Resource: resource, Scope: o.scope, Holder: o.holder,
		Ttl: durationpb.New(o.ttl), RequestId: o.requestID, Wait: o.wait,
	}
	var (
		resp   *api.AcquireResponse
		sentAt time.Duration
	)
	err := c.do(ctx, callSpec{wait: o.wait, requestID: o.requestID}, func(ctx context.Context, conn *grpc.ClientConn) error {
		sentAt = c.clock.Now() // the send time of the attempt that succeeds
		var err error
		resp, err = api.NewLeaseServiceClient(conn).Acquire(ctx, req)
		return err
	})
	if err != nil {
		// An *IndeterminateError when an attempt may have been granted:
		// retrying with its request id yields that lease, never a second.
		return nil, err
	}
	if resp.Replayed && resp.TtlRemaining.AsDuration() <= 0 {
		return nil, fmt.Errorf("%w: request id %q replayed a lease that has ended", ErrLeaseLost, o.requestID)
	}
	if resp.Lease == nil || len(resp.Lease.Id) != len(ID{}) {
		// No node sends this; the network is not trusted. The grant may
		// stand: its request id replays it.
		return nil, &IndeterminateError{RequestID: o.requestID, Err: fmt.Errorf("acquire %q: an answer without a lease of a %d-byte id", resource, len(ID{}))}
	}
	if kept := c.keeper.live(ID(resp.Lease.Id)); kept != nil {
		// The request id replayed a grant this client keeps alive: that
		// lease, as it is (its own renewals hold its safe deadline).
		// Never abandon the replay: releasing its id would free the
		// resource under the kept lease.
		return kept, nil
	}
	l := c.newLease(resp.Lease)
	if o.wait {
		// The send time of a waiting Acquire may lie long before the grant,
		// so the grant's safe window (measured from it) may already be
		// spent. Renew once: its send time is fresh.
		if err := c.renewOnce(ctx, l); err != nil {
			if !errors.Is(err, ErrSafeDeadline) && !errors.Is(err, ErrLeaseLost) {
				// Ended before the renewal (NotFound), or the renewal
				// went unanswered: either way this grant is not handed
				// out, and its request id can only replay it.
				// %v: the renewal's own error (ErrUnavailable's "nothing
				// was done") is not this call's outcome.
				err = fmt.Errorf("%w: acquire %q: granted (token %d), but its confirming renewal failed: %v", ErrLeaseLost, resource, l.token, err)
			}
			return nil, c.abandon(ctx, l, err)
		}
	} else if !l.confirm(sentAt, resp.TtlRemaining.AsDuration()) {
		// The answer came after the grant's safe window closed: the lease
		// may still be held in the cluster, but this process must not use
		// it. Never hand out a dead lease.
		return nil, c.abandon(ctx, l, fmt.Errorf("%w: acquire %q: the grant (token %d) was answered after its safe window closed", ErrSafeDeadline, resource, l.token))
	}
	// When the request id replayed a grant this client still holds, that
	// lease: kept alive as it is, never a second *Lease for one lease id.
	if kept := c.keeper.add(l, l.lastSent); kept != nil {
		return kept, nil
	}
	l.end(ErrLeaseLost)
	return nil, fmt.Errorf("%w: acquire %q: an Acquire of request id %q in this client gave this grant (token %d) up (released, or ending with its ttl)", ErrLeaseLost, resource, o.requestID, l.token)
}

// abandon ends a lease that Acquire will not hand out, releases it (best
// effort, bounded by RequestTimeout even when ctx has ended) so the
// resource is free at once rather than after its ttl, and returns err,
// saying so when the release failed.
func (c *Client) abandon(ctx context.Context, l *Lease, err error) error {
	cause := ErrLeaseLost
	if errors.Is(err, ErrSafeDeadline) {
		cause = ErrSafeDeadline
	}
	l.end(cause)
	// Twice its ttl: the grant cannot outlive that, whatever the clocks.
	if !c.keeper.abandon(l.id, 2*l.ttl) {
		// The same grant is kept alive under another *Lease (a replay of
		// its request id raced this one): its holder keeps it.
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RequestTimeout)
	defer cancel()
	rerr := c.change(rctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := api.NewLeaseServiceClient(conn).Release(ctx, &api.ReleaseRequest{LeaseId: l.id[:]})
		return err
	})
	if rerr != nil {
		return fmt.Errorf("%w; releasing lease %v failed, it ends with its ttl: %v", err, l.id, rerr)
	}
	return err
}

// renewOnce renews l with a unary call and records the confirmation. It
// fails with ErrSafeDeadline when the answer came after the safe window it
// opens had already closed.
func (c *Client) renewOnce(ctx context.Context, l *Lease) error {
	var (
		resp   *api.RenewResponse
		sentAt time.Duration
	)
	err := c.change(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		sentAt = c.clock.Now()
		var err error
		resp, err = api.NewLeaseServiceClient(conn).Renew(ctx, &api.RenewRequest{LeaseId: l.id[:]})
		return err
	})
	if err != nil {
		return err
	}
	if !l.confirm(sentAt, resp.TtlRemaining.AsDuration()) {
		return fmt.Errorf("%w: renewal of %q (token %d) answered after its safe window closed", ErrSafeDeadline, l.resource, l.token)
	}
	return nil
}

func (c *Client) newLease(pl *api.Lease) *Lease {
	l := &Lease{
		c:        c,
		resource: pl.Resource,
		scope:    pl.Scope,
		holder:   pl.Holder,
		token:    pl.Token,
		ttl:      pl.Ttl.AsDuration(),
	}
	copy(l.id[:], pl.Id)
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	return l
}
