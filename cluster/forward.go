package cluster

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// forwardedKey marks a call forwarded by a follower, so that a node that is
// not the leader either answers NotLeader instead of forwarding again.
const forwardedKey = "leasefence-forwarded"

// forwarder keeps one client connection per peer address. routes
// (Config.UnsafePeerRoutes, fault injection only) substitutes the address
// dialled for a peer's.
type forwarder struct {
	opts   []grpc.DialOption
	routes map[string]string
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
}

func newForwarder(opts []grpc.DialOption, routes map[string]string) *forwarder {
	return &forwarder{opts: opts, routes: routes, conns: map[string]*grpc.ClientConn{}}
}

func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	dial := addr
	if via, ok := f.routes[addr]; ok {
		dial = via
	}
	c, err := grpc.NewClient(dial, f.opts...)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, c := range f.conns {
		c.Close()
		delete(f.conns, a)
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

// route decides where a call that needs the leader runs. It returns
// (nil, nil) when this node leads and is ready; a connection to the leader
// when another node leads; or an error when no leader emerges within the
// patience (or the call was already forwarded once).
func (n *Node) route(ctx context.Context) (*grpc.ClientConn, error) {
	deadline := time.Now().Add(leaderPatience)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		if n.lead.Load() != nil {
			return nil, nil
		}
		if n.Err() != nil {
			return nil, n.Err()
		}
		id, addr := n.Leader()
		if addr != "" && addr != n.addr {
			if isForwarded(ctx) {
				return nil, &NotLeaderError{ID: id, Addr: addr}
			}
			return n.fwd.conn(addr)
		}
		// No leader known, or this node was just elected and is committing
		// its barrier: wait a little.
		if time.Now().After(deadline) {
			return nil, n.notLeader()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.stopCh:
			return nil, ErrStopped
		case <-time.After(20 * time.Millisecond):
		}
	}
}
