// Package election is leader election on leasefence leases: one lease per
// election name, held by the leader and kept alive by the client. The
// leadership token is the lease's fencing token: pass it with every effect
// the leader makes, so that a deposed leader's late effects are refused.
package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/leasefence/leasefence/client"
)

// Election campaigns for, holds and observes the leadership of one name.
type Election struct {
	c     *client.Client
	name  string
	id    string
	ttl   time.Duration
	scope string

	mu    sync.Mutex
	lease *client.Lease
}

// Option configures an Election.
type Option func(*Election)

// WithTTL sets the leadership lease's ttl (default client.DefaultTTL): the
// longest a dead leader keeps others waiting.
func WithTTL(d time.Duration) Option { return func(e *Election) { e.ttl = d } }

// WithScope draws leadership tokens from an explicit fencing scope.
func WithScope(s string) Option { return func(e *Election) { e.scope = s } }

// New returns an election for name, campaigning as identity (the lease's
// holder label, shown to observers).
func New(c *client.Client, name, identity string, opts ...Option) *Election {
	e := &Election{c: c, name: name, id: identity, ttl: client.DefaultTTL}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Campaign blocks until this candidate leads or ctx ends. Candidates are
// served first come, first served. The returned lease is the leadership:
// its Context ends when leadership is lost, and its Token is the
// leadership's fencing token. A grant answered after its safe window
// closed (client.ErrSafeDeadline) is not leadership: Campaign goes on
// under a new request id.
func (e *Election) Campaign(ctx context.Context) (*client.Lease, error) {
	// One request id for the whole campaign: if an attempt was granted but
	// its answer lost, the next attempt gets that lease back instead of
	// queueing behind it.
	opts := []client.AcquireOption{client.WithWait(), client.WithTTL(e.ttl), client.WithHolder(e.id)}
	if e.scope != "" {
		opts = append(opts, client.WithScope(e.scope))
	}
	requestID := newCampaignID()
	backoff := 50 * time.Millisecond
	for {
		l, err := e.c.Acquire(ctx, e.name, append(opts, client.WithRequestID(requestID))...)
		if err == nil {
			e.mu.Lock()
			e.lease = l
			e.mu.Unlock()
			return l, nil
		}
		switch {
		case ctx.Err() != nil:
			return nil, err
		case errors.Is(err, client.ErrSafeDeadline), errors.Is(err, client.ErrLeaseLost):
			// The grant this request id names was answered too late to
			// use (Acquire released it) or has ended: its replay can
			// only say so again. Campaign afresh under a new id.
			requestID = newCampaignID()
		case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrNoLeader), errors.Is(err, client.ErrIndeterminate):
			// A waiting Acquire ends when the leader it waited on
			// changes; campaign again until ctx ends.
		default:
			return nil, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

func newCampaignID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "campaign-" + hex.EncodeToString(b)
}

// Resign gives leadership up, if held, so the next candidate leads at once.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

// Leader is the current leadership as observers see it.
type Leader struct {
	// Identity is the leader's holder label; empty when there is none.
	Identity string
	Token    uint64
}

// Leader reads the current leader (linearizably).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	g, err := e.c.Get(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if g.Lease == nil {
		return Leader{}, nil
	}
	return Leader{Identity: g.Lease.Holder, Token: g.Lease.Token}, nil
}

// Observe sends the current leader, then every change, until ctx ends or
// the watch cannot go on (a closed client, an invalid name, events no
// longer retained); then it closes the channel.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		var start client.Position
		backoff := 50 * time.Millisecond
		for {
			g, err := e.c.Get(ctx, e.name)
			if err != nil && (errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrInvalidArgument)) {
				return
			}
			if err == nil {
				cur := Leader{}
				if g.Lease != nil {
					cur = Leader{Identity: g.Lease.Holder, Token: g.Lease.Token}
				}
				select {
				case out <- cur:
				case <-ctx.Done():
					return
				}
				start = g.Position
				break
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
		}
		for ev := range e.c.Watch(ctx, e.name, client.WithAfter(start)) {
			var l Leader
			switch ev.Type {
			case client.EventGranted:
				l = Leader{Identity: ev.Holder, Token: ev.Token}
			case client.EventReleased, client.EventExpired:
			default:
				continue
			}
			select {
			case out <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Callbacks are run by Run.
type Callbacks struct {
	// OnStartedLeading runs when this candidate leads. ctx ends when
	// leadership is lost (at the lease's safe deadline at the latest) or
	// Run's ctx ends; token is the leadership's fencing token.
	OnStartedLeading func(ctx context.Context, token uint64)
	// OnStoppedLeading runs after OnStartedLeading returned and the
	// leadership ended.
	OnStoppedLeading func()
}

// Run campaigns, leads, and campaigns again after each loss, until ctx
// ends; then it resigns if leading. It returns ctx's error, or the first
// error that is not worth another campaign.
func (e *Election) Run(ctx context.Context, cb Callbacks) error {
	for {
		l, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		lctx, cancel := context.WithCancel(l.Context())
		stop := context.AfterFunc(ctx, cancel)
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(lctx, l.Token())
		}
		<-lctx.Done()
		stop()
		cancel()
		// Release on the way out, and after a loss too (best effort): a
		// lease this process no longer trusts should not keep others out.
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.Resign(rctx)
		rcancel()
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
