package cluster

import (
	"strings"
	"sync"

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
// Invariant: every event after lost has either been delivered to the ring
// or is still to come; events at or before lost may be missing (dropped
// from the ring, or applied before a snapshot restore or a restart).
type hub struct {
	mu     sync.Mutex
	ring   []*api.WatchEvent // circular, len == capacity
	head   int               // index of the oldest event
	n      int               // events in the ring
	lost   position          // resuming after a position below this is refused
	gap    bool              // nothing applied yet: positions before the next entry are unknown
	subs   map[*watcher]struct{}
	subBuf int
}

type watcher struct {
	key    string
	prefix bool
	ch     chan *api.WatchEvent
	// overflow is closed when the watcher fell too far behind and was cut.
	overflow chan struct{}
}

func newHub(capacity int) *hub {
	return &hub{ring: make([]*api.WatchEvent, capacity), gap: true, subs: map[*watcher]struct{}{}, subBuf: 1024}
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
		h.ring[i] = nil
	}
	h.head, h.n = 0, 0
	for w := range h.subs {
		close(w.overflow)
		delete(h.subs, w)
	}
}

// publish records the events of the entry at index and hands them to
// watchers. A watcher whose buffer is full is cut, never waited for.
func (h *hub) publish(index uint64, a *fsm.Applied) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The first apply since start without a snapshot restore before it:
	// the state was rebuilt from the start of the log, whose entries before
	// this one (configuration, no-ops) carried no events, so nothing is
	// lost. (A restore comes first when there is a snapshot: reset.)
	h.gap = false
	for i, ev := range a.Events {
		we := toWatchEvent(position{index, uint32(i)}, ev)
		if h.n == len(h.ring) {
			old := h.ring[h.head]
			h.lost = position{old.Position.Index, old.Position.Seq}
			h.ring[h.head] = nil
			h.head = (h.head + 1) % len(h.ring)
			h.n--
		}
		h.ring[(h.head+h.n)%len(h.ring)] = we
		h.n++
		for w := range h.subs {
			if !w.matches(ev.Lease.Resource) {
				continue
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

// subscribe registers a watcher. With after set, it first receives the
// retained events after that position; ok is false when events after it
// are no longer retained.
func (h *hub) subscribe(key string, prefix bool, after *position) (w *watcher, backlog []*api.WatchEvent, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w = &watcher{key: key, prefix: prefix, ch: make(chan *api.WatchEvent, h.subBuf), overflow: make(chan struct{})}
	if after != nil {
		// Before the first apply this node cannot tell what it missed.
		if h.gap || after.less(h.lost) {
			return nil, nil, false
		}
		for i := 0; i < h.n; i++ {
			we := h.ring[(h.head+i)%len(h.ring)]
			p := position{we.Position.Index, we.Position.Seq}
			if after.less(p) && w.matches(we.Lease.Resource) {
				backlog = append(backlog, we)
			}
		}
	}
	h.subs[w] = struct{}{}
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
