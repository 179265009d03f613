package client

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// Position orders events; it is the same on every node.
type Position struct {
	Index uint64
	Seq   uint32
}

func (p Position) less(q Position) bool {
	return p.Index < q.Index || (p.Index == q.Index && p.Seq < q.Seq)
}

// EventType says what happened to a lease.
type EventType int

// Event types.
const (
	EventGranted  = EventType(api.EventType_EVENT_TYPE_GRANTED)
	EventRenewed  = EventType(api.EventType_EVENT_TYPE_RENEWED)
	EventReleased = EventType(api.EventType_EVENT_TYPE_RELEASED)
	EventExpired  = EventType(api.EventType_EVENT_TYPE_EXPIRED)
)

func (t EventType) String() string {
	switch t {
	case EventGranted:
		return "granted"
	case EventRenewed:
		return "renewed"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	}
	return "unknown"
}

// Event is one change to a lease. The last event on a watch channel may
// carry only Err, the reason the watch stopped for good.
type Event struct {
	Position Position
	Type     EventType
	Resource string
	Scope    string
	Holder   string
	Token    uint64
	LeaseID  ID
	Reason   string
	Err      error
}

// LeaseInfo is a lease as Get reports it.
type LeaseInfo struct {
	ID       ID
	Resource string
	Scope    string
	Holder   string
	Token    uint64
	TTL      time.Duration
	// TimeLeft is the ttl remaining when the read was answered.
	TimeLeft time.Duration
}

// GetResult is what Get returns.
type GetResult struct {
	// Lease is nil when the resource is free.
	Lease *LeaseInfo
	// ScopeToken bounds the tokens issued so far in the scope: the highest
	// one, or the cluster's token floor when that is higher (after a
	// restore, a scope's next token is above the floor). The next grant in
	// the scope gets ScopeToken + 1.
	ScopeToken uint64
	// Waiters queued on the resource at the leader.
	Waiters int
	// Position the answer reflects (exactly the entries up to it): watch
	// WithAfter it to miss nothing and see nothing twice.
	Position Position
	// Stale is set for a GetStale answer: read from Node's local state
	// without confirming leadership, it may lag the cluster.
	Stale bool
	// Node is the id of the node whose state answered (the leader's, for
	// Get).
	Node string
}

// Get reads the lease on resource, linearizably.
func (c *Client) Get(ctx context.Context, resource string) (*GetResult, error) {
	return c.get(ctx, resource, false)
}

// GetStale reads the lease on resource from whichever node answers, without
// confirming leadership: cheaper, and possible without a quorum, but it may
// miss recent changes. The result says so (Stale, Node, Position).
func (c *Client) GetStale(ctx context.Context, resource string) (*GetResult, error) {
	return c.get(ctx, resource, true)
}

func (c *Client) get(ctx context.Context, resource string, stale bool) (*GetResult, error) {
	var resp *api.GetResponse
	err := c.call(ctx, true, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = api.NewLeaseServiceClient(conn).Get(ctx, &api.GetRequest{Resource: resource, Stale: stale})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &GetResult{ScopeToken: resp.ScopeToken, Waiters: int(resp.Waiters), Position: Position{Index: resp.AppliedIndex, Seq: ^uint32(0)}, Stale: resp.Stale, Node: resp.NodeId}
	if pl := resp.Lease; pl != nil {
		li := &LeaseInfo{Resource: pl.Resource, Scope: pl.Scope, Holder: pl.Holder, Token: pl.Token, TTL: pl.Ttl.AsDuration(), TimeLeft: resp.TtlRemaining.AsDuration()}
		copy(li.ID[:], pl.Id)
		out.Lease = li
	}
	return out, nil
}

// Watch streams events for key (a resource, or a prefix WithPrefix) until
// ctx ends, then closes the channel. Without WithAfter it starts at the
// position of the first node it reaches when Watch is called: every event
// applied after Watch returns is delivered. When a node fails or
// lags, the watch resumes on another node strictly after the last event
// delivered: nothing is missed or repeated. A final Event with Err set
// precedes the close when the watch cannot go on (for example, events after
// its position are no longer retained anywhere: read and watch afresh).
func (c *Client) Watch(ctx context.Context, key string, opts ...WatchOption) <-chan Event {
	var o watchOptions
	for _, f := range opts {
		f(&o)
	}
	out := make(chan Event, 64)
	last := o.after
	if last == nil && key != "" {
		// Pin the start before returning: every event applied after this
		// call began is delivered, even if the first stream fails.
		if g, err := c.get(ctx, key, true); err == nil {
			last = &g.Position
		}
	}
	go func() {
		defer close(out)
		backoff := 50 * time.Millisecond
		outOfRange := 0
		for ctx.Err() == nil {
			err := c.watchOnce(ctx, key, o.prefix, &last, out)
			if ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.OutOfRange {
				// Another node (one that has not restarted) may still
				// retain the events: try each before giving up.
				if outOfRange++; outOfRange < len(c.cfg.Endpoints) {
					c.failover(c.currentEndpoint(), status.Error(codes.Unavailable, "out of range"))
					continue
				}
			} else {
				outOfRange = 0
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.OutOfRange, codes.PermissionDenied:
				select {
				case out <- Event{Err: fromStatus(err)}:
				case <-ctx.Done():
				}
				return
			}
			if err == ErrClosed {
				return
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
	return out
}

// watchOnce runs one stream on the current endpoint, advancing *last.
func (c *Client) watchOnce(ctx context.Context, key string, prefix bool, last **Position, out chan<- Event) error {
	addr, conn, err := c.endpoint()
	if err != nil {
		return err
	}
	lc := api.NewLeaseServiceClient(conn)
	req := &api.WatchRequest{Key: key, Prefix: prefix}
	if p := *last; p != nil {
		req.After = &api.Position{Index: p.Index, Seq: p.Seq}
	}
	stream, err := lc.Watch(ctx, req)
	if err != nil {
		c.failover(addr, err)
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = status.Error(codes.Unavailable, "watch stream ended")
			}
			if retryable(err) || status.Code(err) == codes.ResourceExhausted {
				c.failover(addr, err)
			}
			return err
		}
		p := Position{Index: ev.Position.GetIndex(), Seq: ev.Position.GetSeq()}
		if *last != nil && !(*last).less(p) {
			continue // already delivered
		}
		e := Event{Position: p, Type: EventType(ev.Type), Reason: ev.Reason}
		if l := ev.Lease; l != nil {
			e.Resource, e.Scope, e.Holder, e.Token = l.Resource, l.Scope, l.Holder, l.Token
			copy(e.LeaseID[:], l.Id)
		}
		select {
		case out <- e:
			*last = &p
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
