package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// healthyStream is how long a watch stream must stay up, if it delivers no
// event, to count as a success when deciding whether to give up.
const healthyStream = time.Second

func setupWatch(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	prefix := fs.Bool("prefix", false, "watch every resource whose name starts with the argument")
	after := fs.String("after", "", "start strictly after `INDEX.SEQ`, as printed by an earlier watch (default: from now)")
	a.unbounded = true // a watch has no natural end
	return func(ctx context.Context, args []string) error {
		w := &watcher{a: a, key: args[0], prefix: *prefix}
		if *after != "" {
			p, err := parsePosition(*after)
			if err != nil {
				return err
			}
			w.pos = p
		}
		err := w.run(ctx)
		if ctx.Err() != nil {
			// Interrupted, or the explicit --timeout ran out: a normal end.
			return nil
		}
		return err
	}
}

// watcher streams events for one key and reconnects after stream errors.
//
// Invariant: pos is the position of the last event printed (or the start
// position). Every stream is opened with after = pos, and an event at or
// before pos is dropped, so across reconnects no event is printed twice and,
// as long as the server keeps events from pos on, none is missed.
type watcher struct {
	a      *app
	key    string
	prefix bool
	pos    *api.Position
}

// run streams until ctx ends (it then returns nil) or until the client's
// call loop gives up: a stream that fails with an error other than
// Unavailable (or the server ending it), or retries that ran out
// (client.ErrUnavailable). Each failed stream is resumed on the node the
// client moves to (the leader first, if the error named it), after the last
// event printed; a stream that worked (delivered an event, or stayed up for
// healthyStream) renews the retry budget.
func (w *watcher) run(ctx context.Context) error {
	if w.pos == nil {
		w.pos = w.baseline(ctx)
	}
	var (
		started  bool // the header is printed
		prevAddr string
		prevErr  error
	)
	for {
		healthy := false
		err := w.a.cl.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			addr := conn.Target()
			if !started {
				started = true
				fmt.Fprintf(w.a.stderr, "leasectl: watching %s %s on %s; Ctrl-C to stop\n", w.what(), w.from(), addr)
			}
			if prevErr != nil {
				fmt.Fprintf(w.a.stderr, "leasectl: watch: %s: %s; resuming after %s on %s\n",
					prevAddr, status.Convert(prevErr).Message(), formatPosition(w.pos), addr)
			}
			start := time.Now()
			got, err := w.stream(ctx, conn)
			if got || time.Since(start) >= healthyStream {
				healthy = true
			}
			prevAddr, prevErr = addr, err
			return err
		}, client.NoAttemptTimeout())
		if ctx.Err() != nil {
			return nil
		}
		if healthy && errors.Is(err, client.ErrUnavailable) {
			continue
		}
		if errors.Is(err, client.ErrUnavailable) {
			return &annotatedError{err: err, note: "leasectl: resume with --after " + formatPosition(w.pos)}
		}
		return err
	}
}

// what names what the watch follows, for its header.
func (w *watcher) what() string {
	switch {
	case w.prefix && w.key == "":
		return "every resource"
	case w.prefix:
		return "every resource under " + w.key
	}
	return w.key
}

// from says where the watch starts, in the form --after takes.
func (w *watcher) from() string {
	if w.pos == nil {
		return "from now"
	}
	return "after " + formatPosition(w.pos)
}

// baseline returns the position just after the last entry applied by the
// first node that answers a stale Get of the key, so that a stream that
// breaks before its first event resumes from the moment the watch started
// rather than from the moment it reconnected. It returns nil (watch from
// now) when no node answers or the key is not a valid resource name.
func (w *watcher) baseline(ctx context.Context) *api.Position {
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, _, err := rpc(bctx, w.a, api.NewLeaseServiceClient, api.LeaseServiceClient.Get, &api.GetRequest{Resource: w.key, Stale: true})
	if err != nil || r.GetAppliedIndex() == 0 {
		return nil
	}
	return &api.Position{Index: r.GetAppliedIndex(), Seq: math.MaxUint32}
}

// stream reads one Watch stream from conn until it fails, and reports
// whether it printed any event. The server ending the stream counts as
// Unavailable: a watch has no natural end.
func (w *watcher) stream(ctx context.Context, conn grpc.ClientConnInterface) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &api.WatchRequest{Key: w.key, Prefix: w.prefix, After: w.pos}
	st, err := api.NewLeaseServiceClient(conn).Watch(sctx, req)
	if err != nil {
		return false, err
	}
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, status.Error(codes.Unavailable, "the server ended the stream")
		}
		if err != nil {
			return got, err
		}
		p := ev.GetPosition()
		if p != nil && w.pos != nil && !positionAfter(p, w.pos) {
			continue // already printed before a reconnect
		}
		w.print(ev)
		got = true
		if p != nil {
			w.pos = p
		}
	}
}

func positionAfter(p, q *api.Position) bool {
	if p.GetIndex() != q.GetIndex() {
		return p.GetIndex() > q.GetIndex()
	}
	return p.GetSeq() > q.GetSeq()
}

// print writes one event as one line.
func (w *watcher) print(ev *api.WatchEvent) {
	l := ev.GetLease()
	if w.a.json {
		w.a.printJSON(eventView{
			Position: formatPosition(ev.GetPosition()),
			Index:    ev.GetPosition().GetIndex(),
			Seq:      ev.GetPosition().GetSeq(),
			Type:     eventType(ev.GetType()),
			Reason:   ev.GetReason(),
			Resource: l.GetResource(),
			Lease:    viewLease(l),
			NowNs:    ev.GetNowNs(),
		})
		return
	}
	fmt.Fprintf(w.a.stdout, "%s %s %s token=%d holder=%s ttl=%s lease=%s reason=%s\n",
		formatPosition(ev.GetPosition()), eventType(ev.GetType()), l.GetResource(), l.GetToken(),
		l.GetHolder(), asDuration(l.GetTtl()), api.FormatLeaseID(l.GetId()), ev.GetReason())
}
