package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// leaseService implements api.LeaseServiceServer. Writes and linearizable
// reads run on the leader; other nodes forward them.
type leaseService struct {
	api.UnimplementedLeaseServiceServer
	n *Node
}

// leaseAtLeader is the route of the lease calls that run on the leader
// (Acquire, Renew and Release through leaseOp, a linearizable Get), after
// each has checked its request and authorized its caller (both differ per
// call; ctx carries the caller). On a node that does not lead it forwards
// the call with call (forward: a silent hop is cut and, when o allows, the
// call is sent again to the leader raft knows then) and returns the answer,
// err as a gRPC status, with local false. local is true when this node
// leads and must serve the call itself. adminAtLeader is its counterpart
// for the administrative calls, which also authorize there (always an
// administrator) and whose hop is not cut.
func leaseAtLeader[T any](ctx context.Context, n *Node, o fwdOpts, call func(context.Context, api.LeaseServiceClient) (T, error)) (resp T, local bool, err error) {
	resp, local, err = forward(ctx, n, o, func(ctx context.Context, conn grpc.ClientConnInterface) (T, error) {
		return call(ctx, api.NewLeaseServiceClient(conn))
	})
	return resp, local, toStatus(err)
}

func (s *leaseService) validateAcquire(req *api.AcquireRequest) (time.Duration, error) {
	cfg := s.n.cfg
	if err := fsm.ValidateNewName("resource", req.Resource); err != nil {
		return 0, err
	}
	if req.Scope != "" {
		if err := fsm.ValidateNewName("scope", req.Scope); err != nil {
			return 0, err
		}
	}
	if err := fsm.ValidateHolder(req.Holder); err != nil {
		return 0, err
	}
	if err := fsm.ValidateRequestID(req.RequestId); err != nil {
		return 0, err
	}
	if req.Ttl == nil {
		return 0, &fsm.FieldError{Field: "ttl", Limit: fmt.Sprintf("required, within [%v, %v]", cfg.MinTTL, cfg.MaxTTL)}
	}
	if err := req.Ttl.CheckValid(); err != nil {
		return 0, &fsm.FieldError{Field: "ttl", Limit: err.Error()}
	}
	ttl := req.Ttl.AsDuration()
	return ttl, fsm.ValidateTTL(ttl, fsm.TTLBounds{Min: cfg.MinTTL, Max: cfg.MaxTTL, SkewMargin: cfg.SkewMargin})
}

// Acquire implements api.LeaseServiceServer.
func (s *leaseService) Acquire(ctx context.Context, req *api.AcquireRequest) (*api.AcquireResponse, error) {
	ttl, err := s.validateAcquire(req)
	if err != nil {
		return nil, toStatus(err)
	}
	ctx, c, err := s.n.authorize(ctx, permResource, req.Resource)
	if err == nil && req.Scope != "" {
		// A scope is a token sequence: drawing from another's would
		// raise the tokens its resources must accept.
		ctx, _, err = s.n.authorize(ctx, permResource, req.Scope)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	fo := fwdOpts{resend: req.RequestId != "", long: req.Wait, requestID: req.RequestId}
	resp, local, err := leaseAtLeader(ctx, s.n, fo, func(ctx context.Context, c api.LeaseServiceClient) (*api.AcquireResponse, error) {
		return c.Acquire(ctx, req)
	})
	if !local {
		return resp, err
	}
	holder := holderFor(c, req.Holder)
	if err := fsm.ValidateHolder(holder); err != nil {
		return nil, toStatus(err)
	}
	if err := s.n.checkLeaseLimit(c, req.Resource); err != nil {
		return nil, toStatus(err)
	}
	cmd := &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
		Resource:  req.Resource,
		Scope:     req.Scope,
		Holder:    holder,
		TtlNs:     int64(ttl),
		RequestId: req.RequestId,
		LeaseId:   newLeaseID(),
		Wait:      req.Wait,
	}}}
	if s.n.planted(BugLeaseIDByResource) {
		cmd.GetAcquire().LeaseId = resourceLeaseID(req.Resource)
	}
	var res fsm.Result
	if req.Wait {
		res, err = s.n.acquireWaiting(ctx, cmd)
	} else {
		res, err = s.n.propose(ctx, cmd)
	}
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, ErrIndeterminate) {
		err = &IndeterminateError{RequestID: req.RequestId, Err: err}
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &api.AcquireResponse{Lease: toAPILease(res.Lease), TtlRemaining: durationpb.New(res.Remaining), Replayed: res.Replayed}, nil
}

// acquireWaiting queues the caller FIFO behind other waiters for the same
// resource on this leader. Only the head of the queue proposes; it retries
// when the resource is released or expires, or when the holder's time left
// runs out, without polling. Leaving (grant, error, cancel) passes the turn.
func (n *Node) acquireWaiting(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	resource := cmd.GetAcquire().Resource
	ls := n.lead.Load()
	if ls == nil {
		return fsm.Result{}, n.notLeader()
	}
	t, ok := n.waiters.join(resource, n.cfg.MaxWaitersPerResource)
	if !ok {
		return fsm.Result{}, fmt.Errorf("%w: %d callers already wait for %q (max %d per resource)",
			ErrLimit, n.cfg.MaxWaitersPerResource, resource, n.cfg.MaxWaitersPerResource)
	}
	defer n.waiters.leave(resource, t)
	select {
	case <-t.turn:
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-ls.ctx.Done(): // this node stepped down: the client retries
		return fsm.Result{}, n.notLeader()
	}
	// Subscribe only at the head of the queue, so the buffer holds events
	// from now on; a refused proposal is retried on each release/expiry.
	w, _, _ := n.hub.subscribe(resource, false, nil)
	defer func() { n.hub.unsubscribe(w) }()
	for {
		res, err := n.propose(ctx, cmd)
		var held *fsm.HeldError
		if err != nil || !errors.As(res.Err, &held) {
			return res, err
		}
		if res.Replayed {
			// The request id's first outcome was a refusal, and a request
			// id's first outcome is final: proposing again cannot change
			// it, and with the holder gone (time left 0) would spin.
			return res, nil
		}
		timer := time.NewTimer(held.TimeLeft + time.Millisecond)
	wait:
		for {
			select {
			case ev := <-w.ch:
				if ev.Type == api.EventType_EVENT_TYPE_RELEASED || ev.Type == api.EventType_EVENT_TYPE_EXPIRED {
					break wait
				}
			case <-w.overflow:
				// Cut for falling behind (or by a snapshot restore):
				// subscribe afresh and try again once.
				n.hub.unsubscribe(w)
				w, _, _ = n.hub.subscribe(resource, false, nil)
				break wait
			case <-timer.C:
				break wait
			case <-ctx.Done():
				timer.Stop()
				return fsm.Result{}, ctx.Err()
			case <-ls.ctx.Done():
				timer.Stop()
				return fsm.Result{}, n.notLeader()
			}
		}
		timer.Stop()
	}
}

// waitQueues keeps, per resource, the FIFO of callers waiting to acquire.
type waitQueues struct {
	mu sync.Mutex
	q  map[string][]*waitTicket
}

type waitTicket struct{ turn chan struct{} } // closed when first in line

func newWaitQueues() *waitQueues { return &waitQueues{q: map[string][]*waitTicket{}} }

// join queues a caller on resource, unless max callers already wait there.
func (w *waitQueues) join(resource string, max int) (*waitTicket, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.q[resource]) >= max {
		return nil, false
	}
	t := &waitTicket{turn: make(chan struct{})}
	w.q[resource] = append(w.q[resource], t)
	if len(w.q[resource]) == 1 {
		close(t.turn)
	}
	return t, true
}

func (w *waitQueues) leave(resource string, t *waitTicket) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[resource]
	for i, x := range q {
		if x != t {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0].turn)
		}
		break
	}
	if len(q) == 0 {
		delete(w.q, resource)
	} else {
		w.q[resource] = q
	}
}

// total returns how many callers wait, over all resources.
func (w *waitQueues) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, q := range w.q {
		n += len(q)
	}
	return n
}

// waiting returns how many callers wait on resource.
func (w *waitQueues) waiting(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.q[resource])
}

// Renew implements api.LeaseServiceServer.
func (s *leaseService) Renew(ctx context.Context, req *api.RenewRequest) (*api.RenewResponse, error) {
	var fwd *api.RenewResponse
	res, err := s.leaseOp(ctx, req.LeaseId, &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: req.LeaseId}}},
		// A renewal may be sent again: a second copy only renews again.
		fwdOpts{resend: true}, func(ctx context.Context, c api.LeaseServiceClient) (err error) {
			fwd, err = c.Renew(ctx, req)
			return err
		})
	switch {
	case err != nil:
		return nil, renewStatus(req.LeaseId, err)
	case fwd != nil:
		return fwd, nil
	}
	return &api.RenewResponse{Lease: toAPILease(res.Lease), TtlRemaining: durationpb.New(res.Remaining)}, nil
}

// renewStatus is the gRPC status of a renewal of the lease id that failed
// with err: a lease that is gone says which one.
func renewStatus(id []byte, err error) error {
	if errors.Is(err, fsm.ErrNotFound) {
		return status.Errorf(codes.NotFound, "lease %s not found or expired", api.FormatLeaseID(id))
	}
	return toStatus(err)
}

// Release implements api.LeaseServiceServer.
func (s *leaseService) Release(ctx context.Context, req *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	var fwd *api.ReleaseResponse
	res, err := s.leaseOp(ctx, req.LeaseId, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: req.LeaseId}}},
		// Not resent: a second copy would answer released=false for a
		// lease the first released.
		fwdOpts{}, func(ctx context.Context, c api.LeaseServiceClient) (err error) {
			fwd, err = c.Release(ctx, req)
			return err
		})
	switch {
	case err != nil:
		return nil, toStatus(err)
	case fwd != nil:
		return fwd, nil
	}
	out := &api.ReleaseResponse{Released: res.Released}
	if res.Released {
		out.Lease = toAPILease(res.Lease)
	}
	return out, nil
}

// leaseOp is the common path of a command about one existing lease: check
// the id, authorize the caller for the lease's resource, then either
// forward the request to the leader with fwd (leaseAtLeader; its answer is
// fwd's to keep; err is then the forwarded call's, a gRPC status) or
// propose cmd here and return its result; a domain refusal comes back as
// err.
func (s *leaseService) leaseOp(ctx context.Context, id []byte, cmd *fsmpb.Command, o fwdOpts, fwd func(context.Context, api.LeaseServiceClient) error) (fsm.Result, error) {
	if err := fsm.ValidateLeaseID(id); err != nil {
		return fsm.Result{}, err
	}
	ctx, err := s.n.authorizeLease(ctx, id)
	if err != nil {
		return fsm.Result{}, err
	}
	_, local, err := leaseAtLeader(ctx, s.n, o, func(ctx context.Context, c api.LeaseServiceClient) (struct{}, error) {
		return struct{}{}, fwd(ctx, c)
	})
	if !local {
		return fsm.Result{}, err
	}
	if res, ok := s.ackEarly(ctx, id, cmd); ok { // planted defects only
		return res, nil
	}
	res, err := s.n.propose(ctx, cmd)
	if err == nil {
		err = res.Err
	}
	return res, err
}

// Get implements api.LeaseServiceServer. By default the answer is
// linearizable: the leader confirms its leadership through a quorum and
// waits until it has applied everything committed when the read arrived.
func (s *leaseService) Get(ctx context.Context, req *api.GetRequest) (*api.GetResponse, error) {
	if err := fsm.ValidateName("resource", req.Resource); err != nil {
		return nil, toStatus(err)
	}
	ctx, _, err := s.n.authorize(ctx, permResource, req.Resource)
	if err != nil {
		return nil, toStatus(err)
	}
	var floor uint64 // the state's index a linearizable answer must be copied at or above
	if !req.Stale && !s.n.planted(BugLocalReads) {
		resp, local, err := leaseAtLeader(ctx, s.n, fwdOpts{resend: true}, func(ctx context.Context, c api.LeaseServiceClient) (*api.GetResponse, error) {
			return c.Get(ctx, req)
		})
		if !local {
			return resp, err
		}
		if floor, err = s.n.readIndex(ctx); err != nil {
			return nil, toStatus(err)
		}
	}
	// A stale answer says so, and whose state at which index it is.
	out := &api.GetResponse{Stale: req.Stale, NodeId: s.n.cfg.ID}
	if !req.Stale {
		out.Waiters = uint32(s.n.waiters.waiting(req.Resource))
	}
	read := s.n.sm.readAt(floor, func(st *fsm.State, index uint64) {
		// The content's own index (changed with st under the lock), not
		// the applied counter, which is recorded after the events are
		// published and so may lag the content by one entry.
		out.AppliedIndex = index
		out.ScopeToken = st.ScopeToken(req.Resource)
		l, ok := st.Lease(req.Resource)
		if !ok || st.Now() > l.ExpiresAt {
			// Past expiry the lease is gone for everyone but the margin
			// still keeps the resource from new holders.
			return
		}
		// On the leader, time left is measured at its cluster time now;
		// the last applied time lags by up to a tick and would overstate it.
		now := st.Now()
		if ls := s.n.lead.Load(); ls != nil && !req.Stale {
			now = max(now, ls.now(s.n.clock))
		}
		if now > l.ExpiresAt {
			return
		}
		out.Lease = toAPILease(l)
		out.ScopeToken = st.ScopeToken(l.Scope)
		out.TtlRemaining = durationpb.New(time.Duration(l.ExpiresAt - now))
	})
	if !read {
		// The state went back behind the read's index after the wait:
		// this node installed an older snapshot, as only a follower does.
		return nil, toStatus(s.n.notLeader())
	}
	return out, nil
}

// Watch implements api.LeaseServiceServer: events from this node's applied
// log, identical in content and position on every node. A watcher that
// falls more than the buffer behind is cut with ResourceExhausted and
// resumes from its last position.
func (s *leaseService) Watch(req *api.WatchRequest, stream grpc.ServerStreamingServer[api.WatchEvent]) error {
	if req.Key == "" && !req.Prefix {
		return toStatus(&fsm.FieldError{Field: "key", Limit: "must not be empty unless prefix is set"})
	}
	if err := fsm.ValidateWatchKey(req.Key); err != nil {
		return toStatus(err)
	}
	ctx := stream.Context()
	_, c, err := s.n.authorize(ctx, permWatch, req.Key)
	if err != nil {
		return toStatus(err)
	}
	if key := watcherKey(ctx, c); key != "local" {
		if !s.n.watchers.add(key, s.n.cfg.MaxWatchersPerClient) {
			return toStatus(fmt.Errorf("%w: %d watch streams already open for this client (max %d)",
				ErrLimit, s.n.cfg.MaxWatchersPerClient, s.n.cfg.MaxWatchersPerClient))
		}
		defer s.n.watchers.done(key)
	}
	if err := s.n.checkWatchAfter(ctx, req.After); err != nil {
		return err
	}
	var after *position
	if req.After != nil {
		after = &position{req.After.Index, req.After.Seq}
	}
	w, backlog, ok := s.n.hub.subscribe(req.Key, req.Prefix, after)
	if !ok && s.n.hub.waitingForFirstApply() {
		// Nothing is lost: this node has not applied an entry since it
		// started, so it cannot tell yet. Retryable, here or elsewhere.
		return status.Error(codes.Unavailable, "this node has not applied an entry since it started; retry the watch")
	}
	if !ok {
		return status.Errorf(codes.OutOfRange, "events after %d.%d are no longer retained on this node; read the current state and watch from now", req.After.Index, req.After.Seq)
	}
	defer s.n.hub.unsubscribe(w)
	for _, ev := range backlog {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case ev := <-w.ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-w.overflow:
			// Deliver what is buffered, then cut: the client resumes.
			for {
				select {
				case ev := <-w.ch:
					if err := stream.Send(ev); err != nil {
						return err
					}
				default:
					return status.Error(codes.ResourceExhausted, "watcher fell behind; resume from the last position received")
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.n.stopCh:
			return status.Error(codes.Unavailable, "node stopping; resume on another node from the last position received")
		}
	}
}

// keepAliveInFlight bounds the renewals one KeepAlive stream may have
// outstanding, so a client that floods the stream cannot hold server memory
// without bound: past it, the stream stops reading until answers go out.
// It also bounds the renewals of one message (api.KeepAliveRequest.more).
const keepAliveInFlight = 4096

// keepAliveRenewTimeout bounds one renewal of a KeepAlive stream. A
// renewal answered late still extends the lease from when the client sent
// it, so the bound only has to end a wait that can no longer help; on a
// disk that takes two seconds per synced write an entry may wait for the
// write in progress and then its own, over four seconds, and answering
// such a renewal as failed at 3 s (as before) threw away a renewal that
// committed and made the client send another to the slow disk.
const keepAliveRenewTimeout = 5 * time.Second

// KeepAlive implements api.LeaseServiceServer: every renewal is a Renew,
// group-committed with all others; the renewals of one message are
// answered together in one message as soon as all their outcomes are
// known. On a follower the stream is relayed to the leader.
func (s *leaseService) KeepAlive(stream grpc.BidiStreamingServer[api.KeepAliveRequest, api.KeepAliveResponse]) error {
	ctx := stream.Context()
	forwarded := isForwarded(ctx)
	if !forwarded {
		conn, addr, err := s.n.routeTo(ctx)
		if err != nil {
			return toStatus(err)
		}
		if conn != nil {
			return s.relayKeepAlive(stream, conn, addr)
		}
	}
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	// One token per renewal outstanding on the stream.
	sem := make(chan struct{}, keepAliveInFlight)
	defer wg.Wait()
	beats := make(chan struct{})
	stopBeats := sync.OnceFunc(func() { close(beats) })
	defer stopBeats() // before wg.Wait: the heartbeat goroutine is on wg
	if wantsHeartbeats(ctx) && !s.n.planted(BugKeepAliveNoBeats) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keepAliveHeartbeats(stream, &sendMu, &sendErr, sem, beats)
		}()
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := checkKeepAlive(req); err != nil {
			return err
		}
		if s.n.lead.Load() == nil {
			// The stream's renewals are served only where they are
			// proposed: end it, so that the client reopens it (towards
			// the leader, or relayed to it) at once instead of
			// collecting refusals. What was in flight is answered first.
			stopBeats()
			wg.Wait()
			return status.Error(codes.Unavailable, "keep-alive: this node no longer leads; open the stream again")
		}
		count := 1 + len(req.More)
		for range count {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := s.renewAll(ctx, req)
			sendMu.Lock()
			if sendErr == nil {
				sendErr = stream.Send(resp)
			}
			sendMu.Unlock()
			// Only once the answers are out: a client that stops reading
			// them must stop the stream, not pile up answers here.
			for range count {
				<-sem
			}
		}()
	}
}

// keepAliveHeartbeat is how often a KeepAlive stream with renewals
// outstanding sends an empty answer (seq 0).
const keepAliveHeartbeat = 300 * time.Millisecond

// keepAliveHeartbeats sends an empty answer (seq 0, nothing else) every
// keepAliveHeartbeat while the stream has renewals outstanding (sem holds
// a token for each), until stop closes. A client moves a stream that stays
// silent for about a second with renewals out, since a node frozen or cut
// off answers nothing; but a live leader whose commits are slow (a disk
// that stalls for over a second) also answered nothing until they
// committed, and its clients moved the stream and sent every renewal
// again, so none was ever confirmed and the leases ended although the
// cluster renewed them (reviewer). The heartbeat tells the two apart; a
// renewal is still answered within keepAliveRenewTimeout. A relaying
// follower passes the leader's heartbeats on, so they say the leader is
// there, not the follower.
func keepAliveHeartbeats(stream grpc.BidiStreamingServer[api.KeepAliveRequest, api.KeepAliveResponse], mu *sync.Mutex, sendErr *error, sem chan struct{}, stop <-chan struct{}) {
	t := time.NewTicker(keepAliveHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if len(sem) == 0 {
			continue
		}
		mu.Lock()
		if *sendErr == nil {
			*sendErr = stream.Send(&api.KeepAliveResponse{})
		}
		mu.Unlock()
	}
}

// relayKeepAlive carries a client's keep-alive stream on a follower to the
// leader over one stream of the follower's own. Forwarding each renewal as
// its own Renew call cost a follower a unary RPC per renewal: at 20 000
// renewals/s that was most of its CPU and the cluster's ceiling. The
// leader authorizes each renewal with the caller's forwarded credentials,
// as it does for every forwarded call. When either side ends, so does the
// other; the client then opens a new stream (on whichever node it picks)
// and sends again what was in flight. The relay also ends, with
// Unavailable, when raft's view of the leader moves away from addr: a
// leader that went silent would otherwise hold the stream open unanswered.
func (s *leaseService) relayKeepAlive(stream grpc.BidiStreamingServer[api.KeepAliveRequest, api.KeepAliveResponse], conn *grpc.ClientConn, addr string) error {
	ctx := stream.Context()
	if s.n.policy != nil {
		c, err := s.n.identify(ctx)
		if err != nil {
			return toStatus(err)
		}
		ctx = context.WithValue(ctx, callerKey{}, c)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx, endHop := s.n.fwd.startHop(ctx, addr, time.Time{}, nil, func() string { _, a := s.n.Leader(); return a })
	defer endHop()
	up, err := api.NewLeaseServiceClient(conn).KeepAlive(markForwarded(ctx))
	if err != nil {
		return status.Errorf(codes.Unavailable, "keep-alive: cannot reach the leader: %v", err)
	}
	done := make(chan error, 2)
	// The handler returns only after the goroutine that sends on stream
	// has stopped (Send after the handler returns is not allowed); the one
	// blocked in stream.Recv ends when the stream does.
	sending := make(chan struct{})
	defer func() { cancel(); <-sending }()
	go func() { // client -> leader
		for {
			req, err := stream.Recv()
			if err != nil {
				done <- err // io.EOF: the client closed its side
				return
			}
			if err := up.Send(req); err != nil {
				return // the leader's side ended: up.Recv says why
			}
		}
	}()
	go func() { // leader -> client
		defer close(sending)
		for {
			resp, err := up.Recv()
			if errors.Is(err, io.EOF) {
				done <- errLeaderEnded
				return
			}
			if err != nil {
				done <- err // the leader's status, passed on as it is
				return
			}
			if err := stream.Send(resp); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err = <-done:
	case <-s.n.stopCh:
		return status.Error(codes.Unavailable, "node stopping; keep alive through another node")
	}
	if errors.Is(context.Cause(ctx), errLeaderMoved) {
		return status.Errorf(codes.Unavailable, "keep-alive: the leader at %s was lost; open the stream again", addr)
	}
	switch {
	case errors.Is(err, io.EOF):
		// The client closed its side: let the leader answer what is in
		// flight (each renewal is bounded by keepAliveRenewTimeout), then
		// end as the leader's side does.
		_ = up.CloseSend()
		select {
		case err = <-done:
		case <-time.After(keepAliveRenewTimeout + time.Second):
			return status.Error(codes.Unavailable, "keep-alive: the leader did not answer every renewal in time")
		}
		if errors.Is(err, errLeaderEnded) {
			return nil
		}
		return err
	case errors.Is(err, errLeaderEnded):
		return status.Error(codes.Unavailable, "keep-alive: the leader ended the stream; open it again")
	}
	return err
}

// errLeaderEnded marks the leader's side of a relayed stream ending
// cleanly.
var errLeaderEnded = errors.New("keep-alive: leader stream ended")
