package cluster

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// position orders events: Raft index, then place inside the entry. It is
// the same on every node because every node applies the same log.
type position struct {
	index uint64
	seq   uint32
}

func (p position) less(q position) bool {
	return p.index < q.index || (p.index == q.index && p.seq < q.seq)
}

// hub fans applied lease events out to watchers and keeps the most recent
// ones in a ring so that a watcher can resume from a position.
//
// Every event published gets a sequence number; the event numbered s sits
// in ring[s % len(ring)] until the one numbered s+len(ring) replaces it.
// Slots are written under mu but read without it (atomically), so that a
// subscriber scanning the ring for its backlog never holds up publish,
// which runs on apply's path: apply must never wait on a watcher.
//
// Invariant: every event after lost has either been delivered to the ring
// or is still to come; events at or before lost may be missing (dropped
// from the ring, or applied before a snapshot restore or a restart). The
// ring retains exactly the events numbered [first, next).
type hub struct {
	mu          sync.Mutex
	ring        []atomic.Pointer[ringSlot]
	first, next uint64   // sequence numbers retained: [first, next)
	lost        position // resuming after a position below this is refused
	gap         bool     // nothing applied yet: positions before the next entry are unknown
	subs        map[*watcher]struct{}
	subBuf      int

	// testScanning, when set (tests only), runs as subscribe starts to
	// scan the ring for a backlog.
	testScanning func()
}

// ringSlot is one retained event, its position and its sequence number;
// never changed once stored. The event is kept as applied and converted
// for the API only when a watcher reads it: every renewal is an event, and
// converting each as it was applied (five allocations) cost every node
// more than the renewal itself, watched or not.
type ringSlot struct {
	seq uint64
	pos position
	ev  fsm.Event
}

func (sl *ringSlot) watchEvent() *api.WatchEvent { return toWatchEvent(sl.pos, sl.ev) }

type watcher struct {
	key    string
	prefix bool
	ch     chan *api.WatchEvent
	// overflow is closed when the watcher fell too far behind and was cut.
	overflow chan struct{}
}

func newHub(capacity int) *hub {
	return &hub{ring: make([]atomic.Pointer[ringSlot], capacity), gap: true, subs: map[*watcher]struct{}{}, subBuf: 1024}
}

func (w *watcher) matches(resource string) bool {
	if w.prefix {
		return strings.HasPrefix(resource, w.key)
	}
	return resource == w.key
}

// reset records that state was replaced by a snapshot up to index: events
// up to it cannot be replayed, and every connected watcher, having missed
// them, is cut so that it resumes (and is refused if it is behind).
func (h *hub) reset(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gap = false
	if p := (position{index: index, seq: ^uint32(0)}); h.lost.less(p) {
		h.lost = p
	}
	for i := range h.ring {
		h.ring[i].Store(nil)
	}
	h.first = h.next
	for w := range h.subs {
		close(w.overflow)
		delete(h.subs, w)
	}
}

// publish records the events of the entry at index and hands them to
// watchers. A watcher whose buffer is full is cut, never waited for; a
// subscriber scanning the ring does not hold mu while it scans.
func (h *hub) publish(index uint64, a *fsm.Applied) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The first apply since start without a snapshot restore before it:
	// the state was rebuilt from the start of the log, whose entries before
	// this one (configuration, no-ops) carried no events, so nothing is
	// lost. (A restore comes first when there is a snapshot: reset.)
	h.gap = false
	size := uint64(len(h.ring))
	for i, ev := range a.Events {
		if h.next-h.first == size {
			// Set lost before the slot is overwritten: a scan that finds
			// the slot replaced learns that the event is gone from lost.
			h.lost = h.ring[h.first%size].Load().pos
			h.first++
		}
		sl := &ringSlot{seq: h.next, pos: position{index, uint32(i)}, ev: ev}
		h.ring[h.next%size].Store(sl)
		h.next++
		var we *api.WatchEvent // converted once, for the first watcher that wants it
		for w := range h.subs {
			if !w.matches(ev.Lease.Resource) {
				continue
			}
			if we == nil {
				we = sl.watchEvent()
			}
			select {
			case w.ch <- we:
			default:
				close(w.overflow)
				delete(h.subs, w)
			}
		}
	}
}

// recent returns up to n of the last events retained, newest first.
func (h *hub) recent(n int) []*api.WatchEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*api.WatchEvent
	size := uint64(len(h.ring))
	for seq := h.next; seq > h.first && len(out) < n; seq-- {
		if sl := h.ring[(seq-1)%size].Load(); sl != nil && sl.seq == seq-1 {
			out = append(out, sl.watchEvent())
		}
	}
	return out
}

// subscribe registers a watcher. With after set, it first receives the
// retained events after that position; ok is false when events after it
// are no longer retained.
//
// The watcher is registered, and the retained range noted, under mu: every
// event published from then on goes to its channel. The backlog (the
// events of that range after the position) is collected with mu released,
// so a long ring never holds up publish. A slot overwritten meanwhile held
// an event at or before lost (publish moves lost first); so if after is not
// below lost once the scan is done, none of those was needed, and the
// backlog plus the channel have every event after the position exactly
// once. Otherwise the resume is refused, as it would have been had it come
// a little later.
func (h *hub) subscribe(key string, prefix bool, after *position) (w *watcher, backlog []*api.WatchEvent, ok bool) {
	w = &watcher{key: key, prefix: prefix, ch: make(chan *api.WatchEvent, h.subBuf), overflow: make(chan struct{})}
	h.mu.Lock()
	// Before the first apply this node cannot tell what it missed.
	if after != nil && (h.gap || after.less(h.lost)) {
		h.mu.Unlock()
		return nil, nil, false
	}
	h.subs[w] = struct{}{}
	from, to := h.first, h.next
	h.mu.Unlock()
	if after == nil {
		return w, nil, true
	}
	if h.testScanning != nil {
		h.testScanning()
	}
	size := uint64(len(h.ring))
	for seq := from; seq < to; seq++ {
		sl := h.ring[seq%size].Load()
		if sl == nil || sl.seq != seq {
			continue // evicted (or cleared by a restore) since: see lost below
		}
		if after.less(sl.pos) && w.matches(sl.ev.Lease.Resource) {
			backlog = append(backlog, sl.watchEvent())
		}
	}
	h.mu.Lock()
	refused := after.less(h.lost)
	if refused {
		delete(h.subs, w)
	}
	h.mu.Unlock()
	if refused {
		return nil, nil, false
	}
	return w, backlog, true
}

// waitingForFirstApply reports whether this node has applied nothing
// since it started: a resume it
// refuses now is not lost, only early.
func (h *hub) waitingForFirstApply() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gap
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	delete(h.subs, w)
	h.mu.Unlock()
}

func toWatchEvent(p position, ev fsm.Event) *api.WatchEvent {
	return &api.WatchEvent{
		Position: &api.Position{Index: p.index, Seq: p.seq},
		Type:     api.EventType(ev.Type),
		Lease:    toAPILease(ev.Lease),
		Reason:   ev.Reason,
		NowNs:    ev.Now,
	}
}
