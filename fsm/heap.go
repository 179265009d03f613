package fsm

// expiryHeap orders live leases by expires_at, ties broken by resource name
// so that every replica (and a restored one) pops the same lease first.
// Each lease tracks its index for O(log n) fix-ups on renew and removal.
type expiryHeap []*Lease

func (h expiryHeap) Len() int { return len(h) }

func (h expiryHeap) Less(i, j int) bool {
	if h[i].ExpiresAt != h[j].ExpiresAt {
		return h[i].ExpiresAt < h[j].ExpiresAt
	}
	return h[i].Resource < h[j].Resource
}

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *expiryHeap) Push(x any) {
	l := x.(*Lease)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.heapIdx = -1
	*h = old[:n-1]
	return l
}
