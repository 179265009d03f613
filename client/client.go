// Package client is the Go client of leasefence: acquire leases with
// fencing tokens, keep them alive over one stream, learn of their loss no
// later than their safe deadline, wait fairly for a held resource, and
// watch lease events.
//
// The fencing token (Lease.Token) is what protects a resource: pass it with
// every effect (package fence checks it at the resource). The lease's Done
// channel and Context only tell this process when to stop trying; they
// cannot stop an effect already in flight.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
	// RequestTimeout bounds one attempt of a call (not a waiting Acquire).
	// Default 5s.
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

func (c *Config) setDefaults() error {
	if len(c.Endpoints) == 0 {
		return errors.New("client: no endpoints")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
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

	mu        sync.Mutex
	conns     map[string]*grpc.ClientConn
	endpoints []string // configured, then leader hints
	cur       int      // index of the endpoint to try first

	keeper *keeper
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

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
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(cfg.Token)))
	}
	c := &Client{
		cfg:       cfg,
		clock:     cfg.Clock,
		opts:      append(opts, cfg.DialOptions...),
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
	return c.call(ctx, false, func(ctx context.Context, conn *grpc.ClientConn) error {
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
	conn, ok := c.conns[addr]
	if !ok {
		var err error
		conn, err = grpc.NewClient(addr, c.opts...)
		if err != nil {
			return "", nil, fmt.Errorf("client: dial %s: %w", addr, err)
		}
		c.conns[addr] = conn
	}
	return addr, conn, nil
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

// call runs op against the current endpoint, failing over and retrying
// with jittered backoff on retryable errors until it succeeds, fails for
// good, RetryFor passes or ctx ends. With perAttempt, each attempt is
// bounded by RequestTimeout. Errors are mapped through fromStatus; a
// retryable failure at the end becomes ErrUnavailable.
func (c *Client) call(ctx context.Context, perAttempt bool, op func(context.Context, *grpc.ClientConn) error) error {
	var giveUp time.Time // RetryFor counts from the first failure
	backoff := 20 * time.Millisecond
	for {
		addr, conn, err := c.endpoint()
		if err != nil {
			return err
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if perAttempt {
			actx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		}
		err = op(actx, conn)
		cancel()
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			if ctx.Err() != nil && retryable(err) {
				return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
			}
			return fromStatus(err)
		}
		c.failover(addr, err)
		if giveUp.IsZero() {
			giveUp = time.Now().Add(c.cfg.RetryFor)
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		sleep := backoff/2 + time.Duration(mrand.Int64N(int64(backoff)))
		backoff = min(2*backoff, time.Second)
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
		case <-c.ctx.Done():
			return ErrClosed
		}
	}
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
