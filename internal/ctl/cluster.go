package ctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// retryPolicy says how hard a command tries before it reports the cluster
// unreachable.
type retryPolicy struct {
	// rounds is how many times every endpoint is tried (at least once).
	rounds int
	// pause is the wait before round r (r >= 1), so that an election in
	// progress can finish.
	pause func(round int) time.Duration
	// connectTimeout bounds one connection attempt, so that a node that
	// drops packets (rather than refusing the connection) costs at most this
	// much before the next endpoint is tried.
	connectTimeout time.Duration
}

var defaultRetryPolicy = retryPolicy{
	rounds: 4,
	pause: func(round int) time.Duration {
		return min(250*time.Millisecond<<min(max(round-1, 0), 4), 2*time.Second)
	},
	connectTimeout: 2 * time.Second,
}

// cluster holds one lazily dialled connection per endpoint and runs calls
// with failover. It is safe for concurrent use.
type cluster struct {
	endpoints []string
	retry     retryPolicy
	// creds secures every connection; nil means plaintext.
	creds credentials.TransportCredentials
	// token, when set, goes with every call as a bearer token.
	token string

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newCluster(endpoints []string, retry retryPolicy) *cluster {
	return &cluster{endpoints: endpoints, retry: retry, conns: map[string]*grpc.ClientConn{}}
}

// conn returns the connection to addr, creating it on first use. Creating
// does not connect: the first call does.
func (c *cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = 2 * time.Second
	creds := c.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: c.retry.connectTimeout}),
	}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(c.token)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *cluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		cc.Close()
		delete(c.conns, addr)
	}
}

// attemptFunc makes one attempt of a call on the node at addr.
type attemptFunc func(ctx context.Context, addr string, cc grpc.ClientConnInterface) error

// call runs fn on the endpoints until one attempt succeeds, and returns the
// address that answered.
//
// Order: the endpoints as configured, each at most once per round; after an
// Unavailable with an api.NotLeader detail naming a leader address not yet
// tried in this round, that address goes next (even when it is not among
// the endpoints), and later rounds start with it. Only codes.Unavailable,
// which gRPC also uses for connection errors, moves on to the next endpoint;
// any other error ends the call at once. After retry.rounds rounds, or when
// ctx ends, call returns an *unreachableError wrapping the last error, whose
// gRPC code is that error's (Unavailable or DeadlineExceeded).
//
// fn may run several times: it must be safe to repeat (acquire reuses one
// request id across attempts for that reason).
func (c *cluster) call(ctx context.Context, fn attemptFunc) (string, error) {
	return c.callFrom(ctx, c.endpoints, fn)
}

func (c *cluster) callFrom(ctx context.Context, order []string, fn attemptFunc) (string, error) {
	order = append([]string(nil), order...)
	var tried []string
	var last error
	for round := 0; round < max(c.retry.rounds, 1); round++ {
		if round > 0 {
			if err := sleepCtx(ctx, c.retry.pause(round)); err != nil {
				if errors.Is(err, context.Canceled) {
					return "", ctxStatus(err)
				}
				return "", &unreachableError{tried: tried, last: last}
			}
		}
		queue := append([]string(nil), order...)
		seen := map[string]bool{}
		for len(queue) > 0 {
			addr := queue[0]
			queue = queue[1:]
			if seen[addr] {
				continue
			}
			seen[addr] = true
			tried = appendUnique(tried, addr)

			err := c.attempt(ctx, addr, fn)
			if err == nil {
				return addr, nil
			}
			last = err
			if ctx.Err() != nil {
				if errors.Is(ctx.Err(), context.Canceled) {
					return addr, ctxStatus(ctx.Err())
				}
				return addr, &unreachableError{tried: tried, last: err}
			}
			switch status.Code(err) {
			case codes.Unavailable:
			case codes.DeadlineExceeded:
				return addr, &unreachableError{tried: tried, last: err}
			default:
				return addr, err
			}
			if nl := notLeaderOf(err); nl != nil && nl.GetLeaderAddr() != "" {
				leader := nl.GetLeaderAddr()
				if !seen[leader] {
					queue = append([]string{leader}, queue...)
				}
				order = moveToFront(order, leader)
			}
		}
	}
	return "", &unreachableError{tried: tried, last: last}
}

func (c *cluster) attempt(ctx context.Context, addr string, fn attemptFunc) error {
	cc, err := c.conn(addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "endpoint %q: %v", addr, err)
	}
	return fn(ctx, addr, cc)
}

// unreachableError reports that no endpoint answered before the retries or
// the deadline ran out. Its gRPC status is the last attempt's (Unavailable
// or DeadlineExceeded) with this error's message.
type unreachableError struct {
	tried []string
	last  error
}

func (e *unreachableError) Error() string {
	msg := "no answer"
	if e.last != nil {
		msg = status.Convert(e.last).Message()
	}
	return fmt.Sprintf("cluster unreachable (tried %s): %s", strings.Join(e.tried, ", "), msg)
}

func (e *unreachableError) Unwrap() error { return e.last }

// notLeaderOf returns the api.NotLeader detail of err, or nil.
func notLeaderOf(err error) *api.NotLeader {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if nl, ok := d.(*api.NotLeader); ok {
			return nl
		}
	}
	return nil
}

// ctxStatus turns a context error into the matching gRPC status error.
func ctxStatus(err error) error {
	return status.FromContextError(err).Err()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// moveToFront returns list with s first (added if missing).
func moveToFront(list []string, s string) []string {
	out := []string{s}
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// rotateAfter returns list starting with the element after s (list
// unchanged when s is absent).
func rotateAfter(list []string, s string) []string {
	for i, x := range list {
		if x == s {
			out := append([]string(nil), list[i+1:]...)
			return append(out, list[:i+1]...)
		}
	}
	return list
}

// bearerToken sends --token with every call, over TLS or (on a trusted
// development network) plaintext.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }
