// Package client is the Go client of leasefence: acquire leases with
// fencing tokens, keep them alive over one stream, learn of their loss no
// later than their safe deadline, wait fairly for a held resource, and
// watch lease events.
//
// The fencing token (Lease.Token) is what protects a resource: pass it with
// every effect (package fence checks it at the resource). The lease's Done
// channel and Context only tell this process when to stop trying; they
// cannot stop an effect already in flight.
//
// Failover: every call the client retries is safe to send twice (an
// Acquire carries a request id; the others are reads, renewals and
// releases). A node that does not answer an attempt within
// Config.RequestTimeout is presumed silent, and the call goes to the node
// that says it leads, inside the caller's deadline; a follower that
// forwards to a silent leader re-routes by itself. A silent leader costs a
// call about one election. A call that gives up says what it saw:
// ErrIndeterminate (an *IndeterminateError, with the request id to retry
// with for an Acquire) when it changes state (an Acquire, a Renew, a
// Release) and may have arrived, ErrNoLeader when nodes
// answered but none could reach a leader, ErrUnavailable when no node
// answered at all.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
)

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// Endpoints lists node addresses (host:port). Any node answers any
	// call; the client follows leader hints and fails over between them.
	Endpoints []string
	// TLS, when set, secures every connection; nil means plaintext.
	TLS *tls.Config
	// Token, when set, is sent with every call as the bearer token
	// (metadata "authorization: Bearer <token>") that the cluster's
	// authorization policy maps to an identity. Without TLS it crosses the
	// network in the clear: use it so only on a trusted network.
	Token string
	// DialOptions are appended to the client's own (credentials).
	DialOptions []grpc.DialOption
	// InProcess, when set, is a node embedded in this process, reached in
	// memory through InProcess.Dial (cluster.Node.DialInProcess): no
	// socket, no TLS, no port limits. It is tried first; calls on it retry,
	// keep leases alive and compute safe deadlines as on any endpoint, and
	// a follower forwards them to the leader. Endpoints may list the other
	// nodes, reached over the network, or be empty.
	InProcess *InProcess
	// RequestTimeout bounds one attempt of a call on one node (not a
	// waiting Acquire). A node that has not answered by then is presumed
	// silent (a frozen or cut-off host answers nothing, not even a reset)
	// and the call is sent to the next node, within the caller's deadline:
	// every call the client retries is safe to send twice (it carries a
	// request id, or it is a read, a renewal or a release). Default 1.2s, a
	// little more than a cluster with default settings needs to notice a
	// silent leader and elect another, so that a follower re-routing its
	// forwarded call is not abandoned.
	RequestTimeout time.Duration
	// RetryFor bounds how long a call retries on Unavailable before it
	// gives up (the caller's context may end it sooner). Default 15s.
	RetryFor time.Duration
	// Drift is the bound on clock rate drift assumed in safe deadlines.
	// Default 1e-4, as the cluster's.
	Drift float64
	// Margin is subtracted from every safe deadline. It must be positive:
	// clock readings are discrete. Default 250ms.
	Margin time.Duration
	// KeepAliveInterval is how often each lease is renewed. Zero means a
	// third of the lease's ttl.
	KeepAliveInterval time.Duration
	// Clock measures safe deadlines; nil means BootClock (counts suspend).
	Clock Clock
	// Testing holds per-client test switches (planted defects for the
	// fault harness). It is empty unless built with the plantedbugs tag.
	Testing TestingKnobs
}

// DefaultRequestTimeout is Config.RequestTimeout when it is zero.
const DefaultRequestTimeout = 1200 * time.Millisecond

// InProcess is an in-process endpoint (Config.InProcess).
type InProcess struct {
	// Addr is the node's advertised address (cluster.Node.Addr): the name
	// other nodes and leader hints give it.
	Addr string
	// Dial opens a new in-memory connection to the node.
	Dial func(context.Context) (net.Conn, error)
}

func (c *Config) setDefaults() error {
	if c.InProcess != nil {
		if c.InProcess.Addr == "" || c.InProcess.Dial == nil {
			return errors.New("client: in-process endpoint needs an address and a dialer")
		}
		eps := []string{c.InProcess.Addr}
		for _, e := range c.Endpoints {
			if e != c.InProcess.Addr {
				eps = append(eps, e)
			}
		}
		c.Endpoints = eps
	}
	if len(c.Endpoints) == 0 {
		return errors.New("client: no endpoints")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryFor == 0 {
		c.RetryFor = 15 * time.Second
	}
	if c.Drift == 0 {
		c.Drift = 1e-4
	}
	if c.Margin == 0 {
		c.Margin = 250 * time.Millisecond
	}
	if c.Clock == nil {
		c.Clock = BootClock{}
	}
	switch {
	case c.RequestTimeout < 0, c.RetryFor < 0, c.KeepAliveInterval < 0:
		return errors.New("client: negative timeout or interval")
	case c.Drift < 0 || c.Drift >= 0.1:
		return fmt.Errorf("client: drift %g outside [0, 0.1)", c.Drift)
	case c.Margin < 0:
		return fmt.Errorf("client: margin %v must be positive", c.Margin)
	}
	return c.Testing.validate()
}

// Client talks to a leasefence cluster. It is safe for concurrent use.
// Close it to end its keep-alive stream and every lease it holds.
type Client struct {
	cfg   Config
	clock Clock
	opts  []grpc.DialOption
	// local dials Config.InProcess (nil: none).
	local []grpc.DialOption

	mu        sync.Mutex
	conns     map[string]*grpc.ClientConn
	endpoints []string // configured, then leader hints
	cur       int      // index of the endpoint to try first

	keeper *keeper
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// streamWindow and connWindow are the flow-control windows of the
// client's connections: what a node may send ahead on one stream (a
// watch's events) and on the connection before the client reads it.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// New returns a client for cfg. It does not contact the cluster; the first
// call does.
func New(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// Fixed flow-control windows: a window gRPC sizes itself has the
		// client answer the node's replies with a PING to estimate the
		// bandwidth, a write on both sides for each call at one call at a
		// time. The node's client server fixes its own the same way
		// (transport.Limits.ClientServerOptions).
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(cfg.Token)))
	}
	var local []grpc.DialOption
	if ip := cfg.InProcess; ip != nil {
		local = append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()), // memory, not a network
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ip.Dial(ctx) }),
		}, opts[1:]...)
		local = append(local, cfg.DialOptions...)
	}
	c := &Client{
		cfg:       cfg,
		clock:     cfg.Testing.clock(cfg.Clock), // cfg.Clock unless a planted bug says otherwise
		opts:      append(opts, cfg.DialOptions...),
		local:     local,
		conns:     map[string]*grpc.ClientConn{},
		endpoints: append([]string(nil), cfg.Endpoints...),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.keeper = newKeeper(c)
	c.wg.Add(2)
	go func() { defer c.wg.Done(); c.keeper.run(c.ctx) }()
	go func() { defer c.wg.Done(); c.keeper.watchdog(c.ctx) }()
	return c, nil
}

// Dial returns a client for endpoints after checking that one of them
// answers within ctx.
func Dial(ctx context.Context, endpoints ...string) (*Client, error) {
	c, err := New(Config{Endpoints: endpoints})
	if err != nil {
		return nil, err
	}
	if err := c.ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) ping(ctx context.Context) error {
	return c.call(ctx, true, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
		return err
	})
}

// Close ends every lease (their Err becomes ErrClosed; they are not
// released, they expire), stops the keep-alive stream and closes the
// connections.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	c.keeper.endAll(ErrClosed)
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for a, conn := range c.conns {
		errs = append(errs, conn.Close())
		delete(c.conns, a)
	}
	return errors.Join(errs...)
}

// endpoint returns the address to try next and its connection.
func (c *Client) endpoint() (string, *grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return "", nil, ErrClosed
	}
	addr := c.endpoints[c.cur%len(c.endpoints)]
	conn, err := c.connLocked(addr)
	return addr, conn, err
}

// connLocked returns the connection to addr, dialling it lazily; c.mu is
// held.
func (c *Client) connLocked(addr string) (*grpc.ClientConn, error) {
	conn, ok := c.conns[addr]
	if !ok {
		var err error
		if c.local != nil && addr == c.cfg.InProcess.Addr {
			conn, err = grpc.NewClient("passthrough:///"+addr, c.local...)
		} else {
			conn, err = grpc.NewClient(addr, c.opts...)
		}
		if err != nil {
			return nil, fmt.Errorf("client: dial %s: %w", addr, err)
		}
		c.conns[addr] = conn
	}
	return conn, nil
}

func (c *Client) currentEndpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endpoints[c.cur%len(c.endpoints)]
}

// failover moves away from addr after a retryable error: to the leader the
// error named, or to the next endpoint.
func (c *Client) failover(addr string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.endpoints[c.cur%len(c.endpoints)] != addr {
		return // someone else moved already
	}
	if hint := leaderHint(err); hint != "" && hint != addr {
		for i, e := range c.endpoints {
			if e == hint {
				c.cur = i
				return
			}
		}
		c.endpoints = append(c.endpoints, hint)
		c.cur = len(c.endpoints) - 1
		return
	}
	c.cur = (c.cur + 1) % len(c.endpoints)
}

// probeTimeout bounds the status round that follows a silent attempt.
const probeTimeout = 300 * time.Millisecond

// relocate moves away from addr, a node that did not answer an attempt in
// time, broke the connection, or answered that it could not reach a
// leader: it may be a frozen or cut-off leader, or a follower whose leader
// is. Rather than trying the endpoints in turn (and meeting a silent
// leader again), it asks every endpoint for its status at once and moves
// to a node that says it leads (the highest term wins); failing that, to
// the first other node that answered, which holds the call until a leader
// is elected; failing that, to the next endpoint. It waits at most
// probeTimeout, and not for addr once every other node has answered.
func (c *Client) relocate(ctx context.Context, addr string) {
	c.mu.Lock()
	eps := append([]string(nil), c.endpoints...)
	conns := make([]*grpc.ClientConn, len(eps))
	for i, e := range eps {
		conns[i], _ = c.connLocked(e)
	}
	c.mu.Unlock()
	type answer struct {
		from         string // the endpoint asked
		addr, leader string // set when it answered; when it leads
		term         uint64
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	answers := make(chan answer, len(eps))
	for i, e := range eps {
		go func() {
			a := answer{from: e}
			if conns[i] != nil {
				st, err := api.NewClusterServiceClient(conns[i]).Status(pctx, &api.StatusRequest{})
				switch {
				case err == nil:
					a.addr, a.term = e, st.Term
					if st.State == "leader" {
						a.leader = e
					}
				case !retryable(err): // it answered, if only to refuse
					a.addr = e
				}
			}
			answers <- a
		}()
	}
	var leader answer
	alive := ""
	silentAsked := false
	for n := range eps {
		a := <-answers
		if a.leader != "" && (leader.leader == "" || a.term > leader.term) {
			leader = a
			cancel() // one leader is enough; the rest answer at once
		}
		if alive == "" && a.addr != "" && a.addr != addr {
			alive = a.addr
		}
		silentAsked = silentAsked || a.from == addr
		if n == len(eps)-2 && !silentAsked && alive != "" {
			break // all but the silent node answered: do not wait for it
		}
	}
	to := leader.leader
	if to == "" {
		to = alive
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.endpoints[c.cur%len(c.endpoints)] != addr {
		return // someone else moved already
	}
	for i, e := range c.endpoints {
		if to != "" && e == to {
			c.cur = i
			return
		}
	}
	c.cur = (c.cur + 1) % len(c.endpoints)
}

// call runs op against the current endpoint, failing over and retrying
// on retryable errors until it succeeds, fails for good, RetryFor passes or
// ctx ends. With perAttempt, each attempt is bounded by RequestTimeout;
// without, op may take until ctx ends (a waiting Acquire). It is do for a
// call that changes nothing.
func (c *Client) call(ctx context.Context, perAttempt bool, op func(context.Context, *grpc.ClientConn) error) error {
	return c.do(ctx, callSpec{wait: !perAttempt}, op)
}

// change is call for a call that changes state without a request id (a
// Renew, a Release): one that may have reached the leader and got no
// definite answer fails with an *IndeterminateError, not with the
// ErrNoLeader or ErrUnavailable that say nothing was done.
func (c *Client) change(ctx context.Context, op func(context.Context, *grpc.ClientConn) error) error {
	return c.do(ctx, callSpec{changes: true}, op)
}

// callSpec says how do may treat a call.
type callSpec struct {
	// wait: the call may rightly take until ctx ends (a waiting Acquire),
	// so its attempts are not bounded by RequestTimeout.
	wait bool
	// changes marks a call that changes state: when no attempt gave a
	// definite answer and one may have taken effect, it fails with an
	// *IndeterminateError.
	changes bool
	// requestID, when set, marks a call that changes state and may be sent
	// again with that id, which its *IndeterminateError carries.
	requestID string
}

// mayChange reports whether the call changes state (see changes).
func (s callSpec) mayChange() bool { return s.changes || s.requestID != "" }

// do runs op against the current endpoint; on a retryable error, or when
// the node does not answer within RequestTimeout, it moves to the next node
// (or the leader a node named) and sends op again, with jittered backoff
// after an answer, until op succeeds, fails for good, RetryFor passes
// (counted from the first failure) or ctx ends. op must be safe to run more
// than once, and never runs twice at the same time. Errors are mapped
// through fromStatus; giving up, do says what it saw (giveUp).
func (c *Client) do(ctx context.Context, spec callSpec, op func(context.Context, *grpc.ClientConn) error) error {
	var (
		giveUpAt time.Time
		seen     attempts
	)
	backoff := 20 * time.Millisecond
	// closed is the call's error when the client closes between attempts:
	// indeterminate if an earlier one may have taken effect.
	closed := func() error {
		if seen.maybeSent && spec.mayChange() {
			return &IndeterminateError{RequestID: spec.requestID, Err: ErrClosed}
		}
		return ErrClosed
	}
	for {
		addr, conn, err := c.endpoint()
		if errors.Is(err, ErrClosed) {
			return closed()
		}
		if err != nil {
			return err
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if !spec.wait {
			actx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		}
		live := ctx.Err() == nil // a canceled attempt of a live caller may have been sent
		err = op(actx, conn)
		silent := err != nil && actx.Err() != nil && ctx.Err() == nil // the attempt's own timeout, not the caller's
		cancel()
		if err == nil {
			return nil
		}
		if hint, ok := overloadHint(err); ok {
			// The leader is busy and proposed nothing: wait as asked and
			// send again to the same node, within RetryFor and ctx.
			if giveUpAt.IsZero() {
				giveUpAt = time.Now().Add(c.cfg.RetryFor)
			}
			wait := overloadWait(hint)
			dl, has := ctx.Deadline()
			if time.Now().Add(wait).After(giveUpAt) || (has && time.Now().Add(wait).After(dl)) {
				return seen.overloaded(spec, err)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return seen.overloaded(spec, err)
			case <-c.ctx.Done():
				return closed()
			}
			continue
		}
		if !retryable(err) {
			if !live && seen.maybeSent && spec.mayChange() {
				// The caller gave up before this attempt, after an
				// earlier one that may have arrived (gRPC refused to
				// send this one): that one's outcome is the call's.
				return seen.giveUp(spec, ctx.Err())
			}
			if spec.mayChange() && mayHaveTakenEffect(err, live) {
				// Not worth another node, and not a definite answer
				// either: the caller's cancel while the attempt was out,
				// or a node that failed after it may have proposed.
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (an attempt was out: %v)", ctx.Err(), err)
				}
				return &IndeterminateError{RequestID: spec.requestID, Err: err}
			}
			return fromStatus(err)
		}
		seen.add(err, silent || ctx.Err() != nil)
		if ctx.Err() != nil {
			return seen.giveUp(spec, ctx.Err())
		}
		switch k := classify(err); {
		case silent, k == attemptBroken, k == attemptNoLeader, k == attemptIndeterminate:
			// The node is silent, or could not reach a leader: the
			// next endpoint in turn may well be the silent leader.
			c.relocate(ctx, addr)
		default:
			c.failover(addr, err)
		}
		if giveUpAt.IsZero() {
			giveUpAt = time.Now().Add(c.cfg.RetryFor)
		}
		if time.Now().After(giveUpAt) {
			return seen.giveUp(spec, err)
		}
		if silent {
			continue // the attempt's timeout was wait enough: next node now
		}
		sleep := backoff/2 + time.Duration(mrand.Int64N(int64(backoff)))
		backoff = min(2*backoff, time.Second)
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return seen.giveUp(spec, ctx.Err())
		case <-c.ctx.Done():
			return closed()
		}
	}
}

// attempts sums up the failed attempts of one call, for giveUp.
type attempts struct {
	answered  bool  // some node answered (a status of its own)
	maybeSent bool  // some attempt may have reached the leader, its outcome unknown
	last      error // the last attempt's error
}

// add records a failed attempt; unanswered says that the attempt's time
// ran out (the node was silent, or the caller's deadline came).
func (a *attempts) add(err error, unanswered bool) {
	a.last = err
	switch k := classify(err); {
	case unanswered || k == attemptBroken:
		a.maybeSent = true
	case k == attemptNotSent:
	case k == attemptIndeterminate:
		a.answered, a.maybeSent = true, true
	default:
		a.answered = true
	}
}

// giveUp is the error of a call that ran out of time: *IndeterminateError
// when it changes state and an attempt may have taken effect, ErrNoLeader
// when nodes answered but none could serve it, ErrUnavailable when no node
// answered at all. cause is why it stopped (the caller's context or the
// last error).
func (a *attempts) giveUp(spec callSpec, cause error) error {
	why := ErrUnavailable
	if a.answered {
		why = ErrNoLeader
	}
	if spec.mayChange() && a.maybeSent {
		return &IndeterminateError{RequestID: spec.requestID, Err: fmt.Errorf("%s: %w", whatAnswered(why), a.errFor(cause))}
	}
	return fmt.Errorf("%w: %w", why, a.errFor(cause))
}

// overloaded is the error of a call whose last attempt was refused for
// overload: ErrOverloaded, or *IndeterminateError when an earlier attempt
// of a call that changes state may have taken effect.
func (a *attempts) overloaded(spec callSpec, last error) error {
	err := fromStatus(last)
	if spec.mayChange() && a.maybeSent {
		return &IndeterminateError{RequestID: spec.requestID, Err: fmt.Errorf("%w (an earlier attempt may have arrived)", err)}
	}
	return err
}

// whatAnswered says in words what why (ErrNoLeader, ErrUnavailable) means.
func whatAnswered(why error) string {
	if why == ErrNoLeader {
		return "no node could reach a leader"
	}
	return "no node answered"
}

func (a *attempts) errFor(cause error) error {
	if a.last != nil && a.last != cause {
		return fmt.Errorf("%w (last attempt: %v)", cause, a.last)
	}
	return cause
}

// newRequestID returns 16 random bytes in hex.
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bearerToken sends Config.Token on every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that a token also works over
// plaintext on a trusted development network (see Config.Token).
func (bearerToken) RequireTransportSecurity() bool { return false }
