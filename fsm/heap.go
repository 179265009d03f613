package fsm

// expiryHeap orders live leases by expires_at, ties broken by resource name
// so that every replica (and a restored one) pops the same lease first.
// Each lease's slot tracks its index for O(log n) removal.
//
// The heap is lazy about renewals: an item's key (at) is the lease's
// expires_at when the item was last placed, and a renewal, which only
// moves expires_at later, swaps in the new record in the item's slot
// without moving the item, so at <= the lease's expires_at. State.tick
// settles stale items as they reach the top; why that expires what an
// eager heap would: fsm/DESIGN.md, "The lazy expiry heap".
type expiryHeap []expiryItem

type expiryItem struct {
	at int64
	s  *leaseSlot
}

func (h expiryHeap) Len() int { return len(h) }

func (h expiryHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].s.l.Resource < h[j].s.l.Resource
}

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].s.heapIdx = i
	h[j].s.heapIdx = j
}

func (h *expiryHeap) Push(x any) {
	sl := x.(*leaseSlot)
	sl.heapIdx = len(*h)
	*h = append(*h, expiryItem{at: sl.l.ExpiresAt, s: sl})
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	sl := old[n-1].s
	old[n-1] = expiryItem{}
	sl.heapIdx = -1
	*h = old[:n-1]
	return sl
}
