package ctl

import (
	"context"
	"encoding/hex"
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
)

// healthyStream is how long a watch stream must stay up, if it delivers no
// event, to count as a success when deciding whether to give up.
const healthyStream = time.Second

func setupWatch(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	prefix := fs.Bool("prefix", false, "watch every resource whose name starts with the argument")
	after := fs.String("after", "", "start strictly after `INDEX.SEQ`, as printed by an earlier watch (default: from now)")
	return func(ctx context.Context, args []string) error {
		w := &watcher{a: a, key: args[0], prefix: *prefix}
		if *after != "" {
			p, err := parsePosition(*after)
			if err != nil {
				return err
			}
			w.pos = p
		}
		cctx, cancel := a.commandContext(ctx, true)
		defer cancel()
		err := w.run(cctx)
		if cctx.Err() != nil {
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

// run streams until ctx ends (it then returns nil or the error of the
// stream it was reading) or until a stream fails with an error that is not
// Unavailable. Unavailable, a connection error, or the server ending the
// stream moves on to the next endpoint (the leader first, if a NotLeader
// detail names it). After every endpoint has failed retry.rounds times in a
// row without delivering an event, run gives up with an *unreachableError.
func (w *watcher) run(ctx context.Context) error {
	eps := w.a.endpoints
	if w.pos == nil {
		w.pos = w.baseline(ctx)
	}
	next := eps[0]
	failures := 0
	var tried []string
	for {
		addr := next
		tried = appendUnique(tried, addr)
		start := time.Now()
		got, err := w.stream(ctx, addr)
		if ctx.Err() != nil {
			return nil
		}
		if status.Code(err) != codes.Unavailable {
			return err
		}
		if got || time.Since(start) >= healthyStream {
			failures = 0
			tried = []string{addr}
		}
		failures++
		if failures >= max(w.a.retry.rounds, 1)*len(eps) {
			return &unreachableError{tried: tried, last: status.Errorf(codes.Unavailable,
				"%s (resume with --after %s)", status.Convert(err).Message(), formatPosition(w.pos))}
		}
		if nl := notLeaderOf(err); nl != nil && nl.GetLeaderAddr() != "" && nl.GetLeaderAddr() != addr {
			next = nl.GetLeaderAddr()
		} else {
			next = rotateAfter(eps, addr)[0]
		}
		fmt.Fprintf(w.a.stderr, "leasectl: watch: %s: %s; resuming after %s on %s\n",
			addr, status.Convert(err).Message(), formatPosition(w.pos), next)
		if failures%len(eps) == 0 {
			if sleepCtx(ctx, w.a.retry.pause(failures/len(eps))) != nil {
				return nil
			}
		}
	}
}

// baseline returns the position just after the last entry applied by the
// first node that answers a stale Get of the key, so that a stream that
// breaks before its first event resumes from the moment the watch started
// rather than from the moment it reconnected. It returns nil (watch from
// now) when no node answers or the key is not a valid resource name.
func (w *watcher) baseline(ctx context.Context) *api.Position {
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var applied uint64
	_, err := w.a.cl.call(bctx, func(ctx context.Context, _ string, cc grpc.ClientConnInterface) error {
		r, err := api.NewLeaseServiceClient(cc).Get(ctx, &api.GetRequest{Resource: w.key, Stale: true})
		applied = r.GetAppliedIndex()
		return err
	})
	if err != nil || applied == 0 {
		return nil
	}
	return &api.Position{Index: applied, Seq: math.MaxUint32}
}

// stream reads one Watch stream from addr until it fails, and reports
// whether it printed any event. The server ending the stream counts as
// Unavailable: a watch has no natural end.
func (w *watcher) stream(ctx context.Context, addr string) (got bool, err error) {
	cc, err := w.a.cl.conn(addr)
	if err != nil {
		return false, status.Errorf(codes.Unavailable, "endpoint %q: %v", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &api.WatchRequest{Key: w.key, Prefix: w.prefix, After: w.pos}
	st, err := api.NewLeaseServiceClient(cc).Watch(sctx, req)
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
		l.GetHolder(), asDuration(l.GetTtl()), hex.EncodeToString(l.GetId()), ev.GetReason())
}
