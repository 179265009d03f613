package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/transport"
)

// forwardedKey marks a call forwarded by a follower, so that a node that is
// not the leader either answers NotLeader instead of forwarding again.
const forwardedKey = "leasefence-forwarded"

// forwarder keeps one client connection per peer address, and the hops in
// flight so that they can be cut when raft's view of the leader moves.
// routes (Config.Unsafe.PeerRoutes, fault injection only) substitutes the
// address dialled for a peer's.
//
// gRPC keepalive pings are no help here: grpc-go raises a client's ping
// interval to at least 10 s, far longer than an election. A hop learns that
// its leader went silent from raft (whose heartbeats notice within the
// heartbeat timeout) and from its own timeout (hopTimeout).
//
// Forwarded unary calls that a live leader answers promptly travel batched
// (transport.CallConn): the calls a follower forwards together share one
// message each way on one stream per leader, rather than costing a gRPC
// call each.
type forwarder struct {
	opts   []grpc.DialOption
	routes map[string]string
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	calls  map[string]*transport.CallConn
	// closed: close ran; no connection is made after it (a loop still
	// running as the node stops would leak one).
	closed bool

	hopMu sync.Mutex
	hops  map[*hop]struct{}
}

// hop is one forwarded call in flight towards addr.
type hop struct {
	addr   string
	cancel context.CancelCauseFunc
}

func newForwarder(opts []grpc.DialOption, routes map[string]string) *forwarder {
	return &forwarder{opts: opts, routes: routes, conns: map[string]*grpc.ClientConn{}, calls: map[string]*transport.CallConn{}, hops: map[*hop]struct{}{}}
}

// batched returns the batching connection to addr (over conn(addr)).
func (f *forwarder) batched(addr string) (*transport.CallConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cc, ok := f.calls[addr]; ok {
		return cc, nil
	}
	c, err := f.connLocked(addr)
	if err != nil {
		return nil, err
	}
	cc := transport.NewCallConn(c)
	f.calls[addr] = cc
	return cc, nil
}

// batchStats sums the calls sent batched and the messages that carried
// them, over every leader this node forwarded to.
func (f *forwarder) batchStats() (calls, messages uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cc := range f.calls {
		c, m := cc.Stats()
		calls += c
		messages += m
	}
	return calls, messages
}

func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connLocked(addr)
}

// connLocked is conn with f.mu held.
func (f *forwarder) connLocked(addr string) (*grpc.ClientConn, error) {
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	if f.closed {
		return nil, ErrStopped
	}
	c, err := grpc.NewClient(f.target(addr), f.opts...)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// dialOnce makes a connection to addr that is not kept (the caller closes
// it), for asking a node that may not be up: a kept connection whose dial
// failed waits out its reconnect backoff, and a call forwarded over it
// soon after would fail at once.
func (f *forwarder) dialOnce(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrStopped
	}
	return grpc.NewClient(f.target(addr), f.opts...)
}

// target is what to dial for addr: its unsafe route when it has one.
func (f *forwarder) target(addr string) string {
	if via, ok := f.routes[addr]; ok {
		return via
	}
	return addr
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for a, cc := range f.calls {
		cc.Close()
		delete(f.calls, a)
	}
	for a, c := range f.conns {
		c.Close()
		delete(f.conns, a)
	}
}

// Why a hop ended before its leader answered.
var (
	// errHopSilent: the leader did not answer within hopTimeout.
	errHopSilent = errors.New("cluster: the leader did not answer in time")
	// errLeaderMoved: raft's view of the leader moved away from the node
	// the call was forwarded to (an election, or the leader was lost).
	errLeaderMoved = errors.New("cluster: the leader changed while the call was forwarded")
	// errAnswerBy: the caller's deadline is so near that only an answer
	// fits into what is left of it (answerBy).
	errAnswerBy = errors.New("cluster: the caller's deadline is near")
)

// startHop derives the context of one forwarded call to addr. It ends with
// cause errLeaderMoved when raft's view of the leader moves away from addr
// (leaderMoved), with the cause the caller gives at deadline, or with ctx.
// end unregisters the hop and reports why it was cut (nil when it was not,
// or when ctx itself ended).
func (f *forwarder) startHop(ctx context.Context, addr string, deadline time.Time, atDeadline error, leader func() string) (hctx context.Context, end func() error) {
	cctx, cancel := context.WithCancelCause(ctx)
	hctx, stop := cctx, context.CancelFunc(func() {})
	if !deadline.IsZero() {
		hctx, stop = context.WithDeadlineCause(cctx, deadline, atDeadline)
	}
	h := &hop{addr: addr, cancel: cancel}
	f.hopMu.Lock()
	f.hops[h] = struct{}{}
	f.hopMu.Unlock()
	// A move between resolving addr and registering the hop is not missed.
	if leader() != addr {
		cancel(errLeaderMoved)
	}
	return hctx, func() error {
		f.hopMu.Lock()
		delete(f.hops, h)
		f.hopMu.Unlock()
		why := context.Cause(hctx)
		stop()
		cancel(nil)
		if ctx.Err() != nil {
			return nil
		}
		switch why {
		case errHopSilent, errLeaderMoved, errAnswerBy:
			return why
		}
		return nil
	}
}

// leaderMoved cuts every hop in flight to another address than addr, the
// leader raft now knows ("" while none is known).
func (f *forwarder) leaderMoved(addr string) {
	f.hopMu.Lock()
	defer f.hopMu.Unlock()
	for h := range f.hops {
		if h.addr != addr {
			h.cancel(errLeaderMoved)
		}
	}
}

// followLeader passes raft's leader observations to the forwarder until
// the node stops.
func (n *Node) followLeader() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	for {
		select {
		case <-ch:
			// Observations may be dropped when the channel is full: read
			// the current leader rather than the observation's.
			_, addr := n.Leader()
			n.fwd.leaderMoved(addr)
		case <-n.stopCh:
			return
		}
	}
}

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// markForwarded marks a call forwarded to the leader and carries the
// caller's credentials with it (forwardCredentials).
func markForwarded(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(forwardCredentials(ctx), forwardedKey, "1")
}

// leaderPatience bounds how long a call waits for an election to finish
// before it fails with Unavailable.
const leaderPatience = 3 * time.Second

// hopTimeout bounds one forwarded hop of a call that a live leader answers
// promptly (all but a waiting Acquire and the keep-alive relay): twice the
// election timeout, at least a second. A leader silent for that long is
// treated as lost even when raft has not noticed yet.
func (n *Node) hopTimeout() time.Duration {
	return max(2*n.cfg.ElectionTimeout, time.Second)
}

// answerBy returns the instant by which a call must answer so that the
// answer still reaches a caller whose deadline is ctx's: a tenth of the
// time left, at most 100 ms, is kept for the answer. Zero when ctx has no
// deadline.
func answerBy(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return d.Add(-min(100*time.Millisecond, time.Until(d)/10))
}

// fwdOpts says how a forwarded call may be treated when its hop goes
// unanswered.
type fwdOpts struct {
	// resend: the call may be sent again, to whichever node leads by then:
	// it carries a request id (a second copy replays the first outcome),
	// or it is a read or a renewal. Otherwise an unanswered hop ends the
	// call with an *IndeterminateError.
	resend bool
	// long: the call may wait for long on the leader (a waiting Acquire):
	// its hop has no timeout of its own and ends only when the leader
	// moves or the caller's deadline nears.
	long bool
	// requestID is reported with an indeterminate outcome.
	requestID string
}

// forward runs call on the leader when another node leads, and reports
// local (doing nothing) when this node leads and should serve the call
// itself. call gets the batching connection (forwarder), or for a long
// call the plain one. A hop to a leader that does not answer within hopTimeout, or
// that raft stops regarding as leader, is cut; the leader is then resolved
// again and a call that may be resent is sent to it, inside the caller's
// deadline. A call that may not be resent answers an *IndeterminateError:
// the cut hop may yet take effect.
func forward[T any](ctx context.Context, n *Node, o fwdOpts, call func(context.Context, grpc.ClientConnInterface) (T, error)) (resp T, local bool, err error) {
	var cut error // the last hop cut unanswered: that copy may yet take effect
	for {
		plain, addr, err := n.routeTo(ctx)
		if err != nil || plain == nil {
			return resp, plain == nil && err == nil, o.afterCut(cut, err)
		}
		var conn grpc.ClientConnInterface = plain
		if !o.long {
			if conn, err = n.fwd.batched(addr); err != nil {
				return resp, false, o.afterCut(cut, err)
			}
		}
		if n.planted(BugForwardNoTimeout) {
			resp, err = call(markForwarded(ctx), conn) // the old forwarding
			return resp, false, err
		}
		deadline, atDeadline := answerBy(ctx), errAnswerBy
		if !o.long {
			if d := time.Now().Add(n.hopTimeout()); deadline.IsZero() || d.Before(deadline) {
				deadline, atDeadline = d, errHopSilent
			}
		}
		hctx, end := n.fwd.startHop(ctx, addr, deadline, atDeadline, func() string { _, a := n.Leader(); return a })
		resp, err = call(markForwarded(hctx), conn)
		why := end()
		if err == nil || why == nil {
			return resp, false, o.afterCut(cut, err)
		}
		n.metrics.forwardCut.Inc()
		if !o.resend || why == errAnswerBy {
			n.log.Warn("forwarded call unanswered; outcome unknown", "leader-addr", addr, "request-id", o.requestID, "reason", why)
			return resp, false, &IndeterminateError{RequestID: o.requestID, Err: fmt.Errorf("forwarded to %s: %w", addr, why)}
		}
		n.log.Info("forwarded call unanswered; sending it to the leader raft knows now", "leader-addr", addr, "reason", why)
		cut = fmt.Errorf("forwarded to %s: %w", addr, why)
	}
}

// afterCut is err, the failure of a call with a request id after an
// earlier hop of it was cut unanswered (cut), as the caller must see it:
// unless it is the leader's definite answer about the call itself, the
// cut copy may yet take effect, so the outcome is unknown — no leader
// found, a refused connection, an overload refusal ("nothing was
// proposed" is true of this copy only) all say nothing of it.
func (o fwdOpts) afterCut(cut, err error) error {
	if cut == nil || err == nil || o.requestID == "" {
		return err
	}
	switch status.Code(toStatus(err)) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.AlreadyExists:
		return err // the leader answered the request (a replay of the cut copy's outcome, if it took effect)
	}
	return &IndeterminateError{RequestID: o.requestID, Err: fmt.Errorf("%w, then: %v", cut, err)}
}

// route decides where a call that needs the leader runs. It returns
// (nil, nil) when this node leads and is ready; a connection to the leader
// when another node leads; or an error when no leader emerges within the
// patience (or the call was already forwarded once).
func (n *Node) route(ctx context.Context) (*grpc.ClientConn, error) {
	conn, _, err := n.routeTo(ctx)
	return conn, err
}

// routeTo is route that also returns the leader's address. While no leader
// is known it waits up to leaderPatience, and answers NotLeader before the
// caller's deadline rather than at it (answerBy), so that a caller hears
// "no leader" instead of nothing.
func (n *Node) routeTo(ctx context.Context) (*grpc.ClientConn, string, error) {
	deadline := time.Now().Add(leaderPatience)
	if d := answerBy(ctx); !d.IsZero() && d.Before(deadline) {
		deadline = d
	}
	for {
		if n.lead.Load() != nil {
			return nil, "", nil
		}
		if n.Err() != nil {
			return nil, "", n.Err()
		}
		id, addr := n.Leader()
		if addr != "" && addr != n.addr {
			if isForwarded(ctx) {
				return nil, "", &NotLeaderError{ID: id, Addr: addr}
			}
			conn, err := n.fwd.conn(addr)
			return conn, addr, err
		}
		// No leader known, or this node was just elected and is committing
		// its barrier: wait a little.
		if time.Now().After(deadline) {
			return nil, "", n.notLeader()
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-n.stopCh:
			return nil, "", ErrStopped
		case <-time.After(20 * time.Millisecond):
		}
	}
}
