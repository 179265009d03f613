package jepsen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
)

// watcher records every lease event of the replicated log under a prefix
// into the history, with the cluster times the client library does not
// expose (granted_at, expires_at, the event's cluster time). It follows
// the stream from node to node as nodes fail, resuming strictly after the
// last position it recorded; when no node retains that position any more
// it records a watch-gap, which makes the interval checker answer unknown.
type watcher struct {
	endpoints []string
	prefix    string
	hist      *history.Writer
	events    int
	gaps      int
	lastIndex atomic.Uint64 // Raft index of the last event position recorded
	released  sync.Map      // lease id (api.FormatLeaseID) -> true, for every released event seen

	// replaced is set by clusterReplaced: positions start again at a new
	// cluster's index 1, so the last one recorded means nothing there.
	replaced atomic.Bool
	mu       sync.Mutex
	cancel   context.CancelFunc // of the stream being read, nil between streams
}

// clusterReplaced tells the watcher that the cluster was replaced by one
// restored from a backup (NemRestore): it drops its position, records a
// watch-gap, and starts afresh at the new cluster's applied index.
func (w *watcher) clusterReplaced() {
	w.replaced.Store(true)
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
}

// sawRelease reports whether the released event of lease id was recorded.
func (w *watcher) sawRelease(id string) bool {
	_, ok := w.released.Load(id)
	return ok
}

// run watches until ctx ends. ready is closed once the first stream is
// established (events applied after that are recorded).
func (w *watcher) run(ctx context.Context, ready chan<- struct{}) {
	conns := make([]*grpc.ClientConn, len(w.endpoints))
	for i, ep := range w.endpoints {
		c, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			conns[i] = c
			defer c.Close()
		}
	}
	var last *api.Position
	node := 0
	refused := 0  // consecutive nodes that no longer retain our position
	onLeader := 0 // nodes passed over because they led, since a stream last ran
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			close(ready)
		}
	}
	defer signal()
	for attempt := 0; ctx.Err() == nil && attempt < 100000; attempt++ {
		conn := conns[node%len(conns)]
		node++
		if conn == nil {
			continue
		}
		// Decline a leader only while no node has refused our position:
		// once one has, the leader may be the one that still holds it.
		streamed, err := w.once(ctx, conn, &last, signal, onLeader < len(conns)-1 && refused == 0)
		if ctx.Err() != nil {
			return
		}
		if streamed {
			onLeader = 0
		}
		if errors.Is(err, errWatchOnLeader) {
			// At most len(conns)-1 in a row (other nodes failing in
			// between count on): then the leader is watched too.
			onLeader++
			continue
		}
		if w.replaced.Swap(false) {
			w.gaps++
			_ = w.hist.Write(history.Record{Kind: history.Observe, Worker: "watch", Op: fmt.Sprintf("gap-%d", w.gaps), Type: history.OpWatchGap, TimeNs: history.Now(),
				Error: "the cluster was restored from a backup", Position: posString(last)})
			last = nil
			refused = 0
			continue
		}
		if status.Code(err) != codes.OutOfRange {
			refused = 0
		} else if refused++; refused >= len(conns) {
			// No node retains our position: start afresh and say so.
			refused = 0
			w.gaps++
			_ = w.hist.Write(history.Record{Kind: history.Observe, Worker: "watch", Op: fmt.Sprintf("gap-%d", w.gaps), Type: history.OpWatchGap, TimeNs: history.Now(),
				Error: err.Error(), Position: posString(last)})
			last = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errWatchOnLeader: the node asked to watch leads, and another may not.
var errWatchOnLeader = errors.New("the node leads: watch a follower")

// once follows one node's stream until it breaks. When avoidLeader is set
// it declines a node that leads (errWatchOnLeader), also one that comes
// to lead while followed (checked every 2 s): a follower sends an
// entry's events as soon as the cluster commits it, the leader only once
// its own apply reached it, and reads-see-watched-entries checks the
// leader's reads against what the watcher was sent.
func (w *watcher) once(ctx context.Context, conn *grpc.ClientConn, last **api.Position, signal func(), avoidLeader bool) (streamed bool, _ error) {
	lc := api.NewLeaseServiceClient(conn)
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	self, err := lc.Get(gctx, &api.GetRequest{Resource: w.prefix + "-", Stale: true})
	if err == nil && avoidLeader && w.leads(gctx, lc, self.NodeId) {
		err = errWatchOnLeader
	}
	cancel()
	if err != nil {
		return false, err
	}
	if *last == nil {
		// Pin the start: everything applied after this read is delivered.
		*last = &api.Position{Index: self.AppliedIndex, Seq: ^uint32(0)}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
	}()
	if w.replaced.Load() {
		return false, context.Canceled // replaced meanwhile: start afresh
	}
	stream, err := lc.Watch(sctx, &api.WatchRequest{Key: w.prefix, Prefix: true, After: *last})
	if err != nil {
		return false, err
	}
	signal()
	var led atomic.Bool
	if avoidLeader {
		// A follower that becomes the leader keeps the stream: leave it
		// when a check finds it leading.
		go func() {
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case <-tick.C:
				}
				gctx, gcancel := context.WithTimeout(sctx, time.Second)
				now := w.leads(gctx, lc, self.NodeId)
				gcancel()
				if now {
					led.Store(true)
					cancel()
					return
				}
			}
		}()
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if led.Load() {
				return true, errWatchOnLeader
			}
			return true, err
		}
		if ev.Position == nil || ev.Lease == nil {
			continue
		}
		p := ev.Position
		if (*last) != nil && !(p.Index > (*last).Index || (p.Index == (*last).Index && p.Seq > (*last).Seq)) {
			continue // already recorded
		}
		*last = &api.Position{Index: p.Index, Seq: p.Seq}
		w.lastIndex.Store(p.Index)
		w.events++
		l := ev.Lease
		if ev.Type == api.EventType_EVENT_TYPE_RELEASED {
			w.released.Store(api.FormatLeaseID(l.Id), true)
		}
		_ = w.hist.Write(history.Record{
			Kind: history.Observe, Worker: "watch", Op: posString(p), Type: history.OpEvent, TimeNs: history.Now(),
			Resource: l.Resource, Token: l.Token, Lease: api.FormatLeaseID(l.Id),
			Event:    strings.ToLower(strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_")),
			Position: posString(p), ClusterNow: ev.NowNs, GrantedAt: l.GrantedAtNs, ExpiresAt: l.ExpiresAtNs, EventHolder: l.Holder,
		})
	}
}

// leads reports whether node leads: a linearizable Get is answered by the
// leader, and names it. An error (no leader, timeout) says no.
func (w *watcher) leads(ctx context.Context, lc api.LeaseServiceClient, node string) bool {
	lead, err := lc.Get(ctx, &api.GetRequest{Resource: w.prefix + "-"})
	return err == nil && lead.NodeId == node
}

func posString(p *api.Position) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", p.Index, p.Seq)
}
