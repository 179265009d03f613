// Package fsm is the deterministic lease state machine of leasefence.
//
// It knows nothing of Raft, gRPC, clocks or randomness: time arrives as the
// cluster time the leader stamped into each entry, lease ids arrive in the
// commands. Two States fed the same entries end byte-identical (compare
// their snapshots). A State is not safe for concurrent use; the node
// serialises Apply and guards reads with its own lock.
package fsm

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// Lease is one grant as the state machine holds it. Times are cluster time
// in nanoseconds.
//
// Inside State, a *Lease record is never changed once made: a renewal
// replaces the record with a new one. That is what lets a request-id entry
// keep the grant's record, and a Snapshot keep the records of the moment,
// without copying them. Callers outside only ever see copies.
type Lease struct {
	ID        [LeaseIDLen]byte
	Resource  string
	Scope     string
	Token     uint64
	Holder    string
	TTL       int64
	GrantedAt int64
	ExpiresAt int64
}

// copy returns a copy of the record, safe to hand out.
func (l *Lease) copy() Lease { return *l }

// leaseSlot is where a held lease lives: its name entry, byID and its
// expiry heap item all point at the slot, so a renewal, which replaces the
// record, writes one pointer instead of three map entries and a heap item.
// heapIdx is the slot's index in the expiry heap (heap moves keep it).
type leaseSlot struct {
	l       *Lease
	heapIdx int
}

// EventType says what happened to a lease.
type EventType uint8

// Event types, in the order of api.EventType.
const (
	EventGranted EventType = iota + 1
	EventRenewed
	EventReleased
	EventExpired
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
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event is a change to a lease, produced by Apply in log order.
type Event struct {
	Type  EventType
	Lease Lease
	// Reason is the command that caused it: "acquire", "renew", "release",
	// "tick" (expiry), or "acquire" for a lease expired by a new grant.
	Reason string
	Now    int64
}

// Result is the outcome of one command of a batch.
type Result struct {
	// Err is a domain error (ErrHeld, ErrNotFound, ErrInvalidArgument,
	// ErrRequestIDReused, ErrLeaseEnded, possibly wrapped) or nil.
	Err error
	// Lease is the lease acted on, when there is one.
	Lease Lease
	// Remaining is expires_at - now at this command's stamp, never negative.
	Remaining time.Duration
	// Replayed is set when an Acquire's request id matched an earlier
	// outcome: a live grant (Err nil), a refusal (*HeldError), or a grant
	// whose lease has ended (*EndedError; Lease is the grant as last held).
	Replayed bool
	// Released is Release's answer: false for an unknown or expired id.
	Released bool
	// Expired counts the leases a Tick removed.
	Expired int
}

// Applied is what one entry did.
type Applied struct {
	// Now is the cluster time the entry was applied at.
	Now     int64
	Results []Result
	Events  []Event
	// RefusalsEvicted counts refused request ids forgotten before their
	// refusal_keep because max_refusals was reached.
	RefusalsEvicted int
}

// dedupRef is one request id's entry: what a retried Acquire needs to be
// answered with the first outcome, and to tell a retry from another request
// under the same id. It keeps the grant's own record (records never change;
// a renewal makes a new one) instead of a copy of it.
type dedupRef struct {
	requestID string
	at        int64
	// lease is the grant's record, or, when refused, the record of the
	// lease that held the resource: a request id's first outcome is final
	// either way. A grant's record also holds the request's resource,
	// effective scope, holder and ttl.
	lease *Lease
	// params is, for a refusal, requestFingerprint of the refused
	// request's effective scope, holder, ttl and wait; 0 for a grant.
	params  uint64
	refused bool
	wait    bool
	// legacy marks an entry restored from a snapshot written before
	// parameters were recorded: only what its record holds is compared.
	legacy bool
}

// sameRequest reports whether c (already validated) is the request d
// remembers: same resource, effective scope, holder, ttl and wait.
//
// A grant compares the fields themselves, from its lease record: a
// request id can never replay a lease of another resource, scope, holder
// or ttl. A refusal compares the resource (the holder's record has it) and
// a 64-bit fingerprint of the rest. Two different requests with one id and
// colliding fingerprints would get the first refusal again instead of
// InvalidArgument: still a refusal, so a collision can never grant or
// replay a lease; it only changes which error the caller sees.
func (d *dedupRef) sameRequest(c *fsmpb.Acquire, scope string, k *TestingKnobs) bool {
	if d.lease.Resource != c.Resource {
		return false
	}
	if k.planted(BugDedupResourceOnly) {
		return true
	}
	switch {
	case d.refused && d.legacy:
		return true // an older version compared the resource only
	case d.refused:
		return d.params == requestFingerprint(scope, c.Holder, c.TtlNs, c.Wait)
	}
	if d.lease.Scope != scope || d.lease.Holder != c.Holder || d.lease.TTL != c.TtlNs {
		return false
	}
	return d.legacy || d.wait == c.Wait
}

// requestFingerprint is FNV-1a (64 bit) over an Acquire's effective scope,
// holder, ttl and wait flag, each string length-prefixed so that no two
// different parameter lists encode alike. Deterministic on every replica
// and every version: it is written into snapshots.
func requestFingerprint(scope, holder string, ttl int64, wait bool) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	byte1 := func(b byte) { h = (h ^ uint64(b)) * prime }
	u64 := func(v uint64) {
		for i := 0; i < 8; i++ {
			byte1(byte(v >> (8 * i)))
		}
	}
	str := func(s string) {
		u64(uint64(len(s)))
		for i := 0; i < len(s); i++ {
			byte1(s[i])
		}
	}
	str(scope)
	str(holder)
	u64(uint64(ttl))
	if wait {
		byte1(1)
	} else {
		byte1(0)
	}
	return h
}

// dedupQueue holds request-id entries in the order they were made (at is
// non-decreasing since now is); q[head:] are live, and the entry with
// sequence number seq is q[seq-base]. An element, once appended, is never
// written again (pruning only moves head, and compaction copies the live
// ones to a new array), so a Snapshot may keep a slice of it.
type dedupQueue struct {
	q    []dedupRef
	head int
	base uint64
}

func (q *dedupQueue) len() int                 { return len(q.q) - q.head }
func (q *dedupQueue) get(seq uint64) *dedupRef { return &q.q[seq-q.base] }

// live returns the live entries, capped so an append cannot write into
// a Snapshot's view.
func (q *dedupQueue) live() []dedupRef { return q.q[q.head:len(q.q):len(q.q)] }

func (q *dedupQueue) push(d dedupRef) uint64 {
	seq := q.base + uint64(len(q.q))
	q.q = append(q.q, d)
	return seq
}

// compact copies the live entries to a new array once a quarter of the
// queue is dead: pruned entries are not cleared in place (a Snapshot may
// be reading them), so they hold their records until then.
func (q *dedupQueue) compact() {
	if q.head > 1024 && q.head*4 > len(q.q) {
		q.q = append([]dedupRef(nil), q.q[q.head:]...)
		q.base += uint64(q.head)
		q.head = 0
	}
}

// refusalSeq marks a dedup map value as a sequence number of the refusal
// queue rather than the grant queue.
const refusalSeq = uint64(1) << 63

// nameEntry is what the state knows under one name: the lease on the
// resource of that name, and the token counter of the scope of that name.
// A lease's scope is its resource's name unless the grant names another, so
// most leases need one map entry for both instead of one in each of two
// maps. An entry with neither is deleted.
type nameEntry struct {
	slot    *leaseSlot // nil: the resource is not held
	counter uint64     // 0: no scope of this name (a scope's counter starts at 1)
}

// State is the lease state machine.
//
// Invariants kept here:
//   - names[scope].counter only grows; every lease's token is <= its
//     scope's counter and was the counter's value right after the grant
//     that made it;
//   - floor only grows (only RaiseFloor, on a restore, moves it); a grant
//     in any scope, known or not, draws max(counter, floor) + 1, so every
//     token granted is above the floor of its moment;
//   - at most one lease per resource; byID and the names' slots hold the
//     same set of slots, of size leases; scopes counts the names with a
//     counter;
//   - every held lease's slot is in the expiry heap exactly once;
//   - now never decreases.
type State struct {
	now int64
	// floor is the cluster-wide token floor (see RaiseFloor).
	floor  uint64
	names  map[string]nameEntry
	leases int
	scopes int
	byID   map[[LeaseIDLen]byte]*leaseSlot
	expiry expiryHeap
	// dedup maps a live request id to its sequence number: its entry is
	// grants.get(seq), or refusals.get(seq&^refusalSeq) when refusalSeq is
	// set. The map holds no pointers of its own, and the entries sit by
	// value in the queues' slices. Grants are kept dedup_keep; refusals
	// are kept refusal_keep and at most max_refusals of them (the oldest
	// go first), so a storm of refused polls cannot grow the state without
	// bound.
	dedup    map[string]uint64
	grants   dedupQueue
	refusals dedupQueue
	// owners counts the leases in byID per holder owner (held.go).
	owners map[string]int
	// served holds, sorted, the ids of the nodes recorded as having served
	// (EntryNodeServed); a restore seeds a state without them (ClearServed).
	served []string
	// knobs are the test switches the State was built with (empty in a
	// release build); they never change.
	knobs TestingKnobs
}

// New returns an empty State at cluster time zero, built with opts.
func New(opts ...Option) *State {
	return &State{
		names: make(map[string]nameEntry),
		byID:  make(map[[LeaseIDLen]byte]*leaseSlot),
		dedup: make(map[string]uint64),
		knobs: applyOptions(opts).knobs,
	}
}

// Now returns the last applied cluster time.
func (s *State) Now() int64 { return s.now }

// Len returns the number of leases held (including leases past expiry that
// no Tick has removed yet).
func (s *State) Len() int { return s.leases }

// Lease returns the lease on resource, if any. A lease past its expiry but
// not yet removed is still returned; callers compare ExpiresAt to Now.
func (s *State) Lease(resource string) (Lease, bool) {
	sl := s.names[resource].slot
	if sl == nil {
		return Lease{}, false
	}
	return sl.l.copy(), true
}

// Leases returns copies of the leases held on resources that start with
// prefix, the first limit of them by resource (limit <= 0: all), sorted,
// and how many matched in all. It visits every lease but keeps at most
// limit: for display (the status page), not for a hot path.
func (s *State) Leases(prefix string, limit int) (out []Lease, matched int) {
	var top byResourceDesc // with a limit: the limit smallest, largest on top
	for _, sl := range s.byID {
		l := sl.l
		if !strings.HasPrefix(l.Resource, prefix) {
			continue
		}
		matched++
		switch {
		case limit <= 0 || len(top) < limit:
			heap.Push(&top, l)
		case l.Resource < top[0].Resource:
			top[0] = l
			heap.Fix(&top, 0)
		}
	}
	out = make([]Lease, 0, len(top))
	for _, l := range top {
		out = append(out, l.copy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, matched
}

// byResourceDesc is a max-heap of leases by resource.
type byResourceDesc []*Lease

func (h byResourceDesc) Len() int           { return len(h) }
func (h byResourceDesc) Less(i, j int) bool { return h[i].Resource > h[j].Resource }
func (h byResourceDesc) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byResourceDesc) Push(x any)        { *h = append(*h, x.(*Lease)) }
func (h *byResourceDesc) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// LeaseByID returns the lease with the given id, if held.
func (s *State) LeaseByID(id [LeaseIDLen]byte) (Lease, bool) {
	sl, ok := s.byID[id]
	if !ok {
		return Lease{}, false
	}
	return sl.l.copy(), true
}

// ScopeCounter returns the highest token issued in scope (0 if none) by
// this state's history; after a restore, a scope's next token may be far
// above it (see Floor).
func (s *State) ScopeCounter(scope string) uint64 { return s.names[scope].counter }

// Floor returns the cluster-wide token floor: every scope's next token is
// above it. It is 0 until a restore from a backup raises it.
func (s *State) Floor() uint64 { return s.floor }

// ScopeToken returns what the scope's next grant will exceed by one:
// max(its counter, the floor). Every token the scope has issued, before a
// restore too (as far as the restore's bump covered), is at most this.
func (s *State) ScopeToken(scope string) uint64 { return max(s.names[scope].counter, s.floor) }

// index records l, whose resource is not held and whose id is not in use,
// in a new slot under its name and its id, and returns the slot; the
// caller places it in the expiry heap.
func (s *State) index(l *Lease) *leaseSlot {
	sl := &leaseSlot{l: l}
	e := s.names[l.Resource]
	e.slot = sl
	s.names[l.Resource] = e
	s.byID[l.ID] = sl
	s.leases++
	s.countOwner(l.Holder, 1)
	return sl
}

// nextToken advances scope's counter to max(counter, floor) + 1 and
// returns it; ok is false, and nothing changes, when the scope's token
// sequence is exhausted (the counter or the floor is 2^64-1: a token
// never wraps around to a low number).
func (s *State) nextToken(scope string) (token uint64, ok bool) {
	e := s.names[scope]
	base := max(e.counter, s.floor)
	if base == ^uint64(0) {
		return 0, false
	}
	if e.counter == 0 {
		s.scopes++
	}
	e.counter = base + 1
	s.names[scope] = e
	return e.counter, true
}

// NextExpiry returns a lower bound of the earliest expires_at of all held
// leases: the key of the expiry heap's top, which is a renewed lease's
// expiry before its renewal until a Tick settles it (renewals leave the
// heap alone). After a Tick that did not stop at its max_expire, the bound
// is exact or at least settleAhead past the Tick's time less the skew
// margin: a leader that schedules its next Tick by it ticks early at most
// about once per settleAhead.
func (s *State) NextExpiry() (int64, bool) {
	if len(s.expiry) == 0 {
		return 0, false
	}
	return s.expiry[0].at, true
}

// Apply applies one log entry. A non-nil error means the entry could not be
// applied at all (ErrCorruptEntry, ErrUnknownEntry): nothing changed, and
// the caller must stop rather than skip it. Domain refusals are in the
// Results, not in the error. An unknown ignorable entry returns an empty
// Applied.
func (s *State) Apply(entry []byte) (*Applied, error) {
	v, err := decodeEntry(entry, &s.knobs)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return &Applied{Now: s.now}, nil
	}
	if v.served != "" {
		s.addServed(v.served)
		return &Applied{Now: s.now}, nil
	}
	return s.applyBatch(v), nil
}

// addServed records id among the served nodes, once. The slice is
// replaced, never written in place: a Snapshot may share the old one.
func (s *State) addServed(id string) {
	i, found := slices.BinarySearch(s.served, id)
	if !found {
		s.served = slices.Concat(s.served[:i:i], []string{id}, s.served[i:])
	}
}

// Served returns, sorted, the ids of the nodes recorded as having served
// in this cluster (EntryNodeServed). The slice is the caller's.
func (s *State) Served() []string { return slices.Clone(s.served) }

// HasServed reports whether id is recorded as having served.
func (s *State) HasServed(id string) bool {
	_, found := slices.BinarySearch(s.served, id)
	return found
}

// ClearServed forgets the served nodes: a restore seeds a new cluster
// from a backup, whose members have served nothing of it yet.
func (s *State) ClearServed() { s.served = nil }

func (s *State) applyBatch(v *batchView) *Applied {
	if v.now > s.now {
		s.now = v.now
	}
	p := v.params
	if p.refusalKeep == 0 {
		p.refusalKeep = p.keep
	}
	a := &Applied{Now: s.now, Results: make([]Result, len(v.cmds)), Events: make([]Event, 0, len(v.cmds))}
	for i, c := range v.cmds {
		if c.cmd == nil {
			a.Results[i] = s.renew(a, c.renewID)
			continue
		}
		switch op := c.cmd.Op.(type) {
		case *fsmpb.Command_Acquire:
			a.Results[i] = s.acquire(a, op.Acquire, p)
		case *fsmpb.Command_Renew:
			a.Results[i] = s.renew(a, op.Renew.GetLeaseId())
		case *fsmpb.Command_Release:
			a.Results[i] = s.release(a, op.Release)
		case *fsmpb.Command_Tick:
			a.Results[i] = s.tick(a, op.Tick, p)
		}
	}
	return a
}

// batchParams are the leader's parameters, stamped into each entry so that
// every replica decides alike whatever its own configuration.
type batchParams struct {
	margin      int64  // skew margin
	keep        int64  // how long a grant's request id is remembered
	refusalKeep int64  // how long a refusal's request id is remembered
	maxRefusals uint64 // at most this many refusals remembered; 0: no cap
}

func (s *State) remaining(l *Lease) time.Duration {
	if l.ExpiresAt <= s.now {
		return 0
	}
	return time.Duration(l.ExpiresAt - s.now)
}

// ValidateAcquire checks an Acquire's fields against the rules every
// replica enforces (the leader's ttl bounds are checked before proposing).
func ValidateAcquire(c *fsmpb.Acquire, skewMargin int64) error {
	if err := ValidateName("resource", c.Resource); err != nil {
		return err
	}
	if c.Scope != "" {
		if err := ValidateName("scope", c.Scope); err != nil {
			return err
		}
	}
	if err := ValidateHolder(c.Holder); err != nil {
		return err
	}
	if err := ValidateRequestID(c.RequestId); err != nil {
		return err
	}
	if err := ValidateLeaseID(c.LeaseId); err != nil {
		return err
	}
	return ValidateTTL(time.Duration(c.TtlNs), TTLBounds{SkewMargin: time.Duration(skewMargin)})
}

func (s *State) acquire(a *Applied, c *fsmpb.Acquire, p batchParams) Result {
	margin := p.margin
	if err := ValidateAcquire(c, margin); err != nil {
		return Result{Err: err}
	}
	scope := c.Scope
	if scope == "" {
		scope = c.Resource
	}
	if c.RequestId != "" {
		if seq, ok := s.dedup[c.RequestId]; ok {
			d := s.dedupEntry(seq)
			if !d.sameRequest(c, scope, &s.knobs) {
				// A request id names one request: never replay an outcome
				// to another (a lease of another scope would hand out a
				// token of the wrong sequence).
				return Result{Err: ErrRequestIDReused}
			}
			if d.refused {
				// Refused the first time: a late copy (held back in the
				// network, then delivered) must not grant what its client
				// was told it did not get.
				held := &HeldError{Resource: d.lease.Resource, Holder: d.lease.Holder, Token: d.lease.Token}
				if sl, ok := s.byID[d.lease.ID]; ok && s.now <= sl.l.ExpiresAt+margin {
					held.TimeLeft = time.Duration(sl.l.ExpiresAt + margin - s.now)
				}
				return Result{Err: held, Replayed: true}
			}
			// The first outcome again. Remaining is measured now, at this
			// command's stamp, so a client's safe window is never stretched.
			sl, held := s.byID[d.lease.ID]
			if !held || s.now >= sl.l.ExpiresAt {
				// The grant has ended (released, expired, removed): say
				// so, never answer it as a live grant with no time left.
				ended := d.lease.copy()
				if held {
					ended = sl.l.copy()
				}
				return Result{Err: &EndedError{RequestID: c.RequestId, Lease: ended}, Lease: ended, Replayed: true}
			}
			return Result{Lease: sl.l.copy(), Remaining: s.remaining(sl.l), Replayed: true}
		}
	}
	if curSlot := s.names[c.Resource].slot; curSlot != nil {
		cur := curSlot.l
		if s.knobs.planted(BugGrantNoMargin) {
			margin = 0
		}
		if s.now <= cur.ExpiresAt+margin {
			if c.RequestId != "" && !c.Wait {
				s.addRefusal(a, dedupRef{
					requestID: c.RequestId, at: s.now, lease: cur, refused: true,
					params: requestFingerprint(scope, c.Holder, c.TtlNs, c.Wait),
				}, p.maxRefusals)
			}
			return Result{Err: &HeldError{
				Resource: cur.Resource,
				Holder:   cur.Holder,
				Token:    cur.Token,
				TimeLeft: time.Duration(cur.ExpiresAt + margin - s.now),
			}}
		}
		s.remove(a, curSlot, EventExpired, "acquire")
	}
	var id [LeaseIDLen]byte
	copy(id[:], c.LeaseId)
	if _, dup := s.byID[id]; dup {
		return Result{Err: &FieldError{Field: "lease_id", Limit: "must be unique"}}
	}
	token, ok := s.nextToken(scope)
	if !ok {
		return Result{Err: &FieldError{Field: "scope", Limit: fmt.Sprintf("token sequence of %q is exhausted (2^64-1)", scope)}}
	}
	l := &Lease{
		ID:        id,
		Resource:  c.Resource,
		Scope:     scope,
		Token:     token,
		Holder:    c.Holder,
		TTL:       c.TtlNs,
		GrantedAt: s.now,
		ExpiresAt: s.now + c.TtlNs,
	}
	heap.Push(&s.expiry, s.index(l))
	if c.RequestId != "" {
		s.dedup[c.RequestId] = s.grants.push(dedupRef{requestID: c.RequestId, at: s.now, lease: l, wait: c.Wait})
	}
	a.Events = append(a.Events, Event{Type: EventGranted, Lease: l.copy(), Reason: "acquire", Now: s.now})
	return Result{Lease: l.copy(), Remaining: s.remaining(l)}
}

// renew renews the lease of leaseID, which may be a slice of the entry's
// bytes: it is not kept.
func (s *State) renew(a *Applied, leaseID []byte) Result {
	if err := ValidateLeaseID(leaseID); err != nil {
		return Result{Err: err}
	}
	var id [LeaseIDLen]byte
	copy(id[:], leaseID)
	sl, ok := s.byID[id]
	if !ok || (s.now > sl.l.ExpiresAt && !s.knobs.planted(BugRenewAfterExpiry)) {
		return Result{Err: ErrNotFound}
	}
	// A new record: the old one may be held by a request-id entry (as
	// granted) or by a Snapshot in progress. The slot's heap item keeps
	// its key, now stale: expires_at only moves later (now never
	// decreases, the ttl is the grant's), and a Tick settles the item when
	// it reaches the top (expiryHeap).
	l := *sl.l
	l.ExpiresAt = s.now + l.TTL
	sl.l = &l
	a.Events = append(a.Events, Event{Type: EventRenewed, Lease: l, Reason: "renew", Now: s.now})
	return Result{Lease: l, Remaining: s.remaining(&l)}
}

func (s *State) release(a *Applied, c *fsmpb.Release) Result {
	if err := ValidateLeaseID(c.LeaseId); err != nil {
		return Result{Err: err}
	}
	var id [LeaseIDLen]byte
	copy(id[:], c.LeaseId)
	sl, ok := s.byID[id]
	if !ok || s.now > sl.l.ExpiresAt {
		// Unknown or expired: not an error. An expired lease stays until
		// expires_at + skew_margin, when a Tick or a new grant removes it.
		return Result{Released: false}
	}
	out := sl.l.copy()
	s.remove(a, sl, EventReleased, "release")
	return Result{Released: true, Lease: out}
}

// settleAhead is how far past its own time a Tick settles renewed items of
// the expiry heap, so that NextExpiry does not have the leader tick again at
// once for leases renewed meanwhile. It changes only how much settling a
// Tick does, never what it expires: replicas may differ in it.
const settleAhead = int64(time.Second)

func (s *State) tick(a *Applied, c *fsmpb.Tick, p batchParams) Result {
	n := 0
	for len(s.expiry) > 0 && (c.MaxExpire == 0 || n < int(c.MaxExpire)) {
		top := &s.expiry[0]
		if top.at != top.s.l.ExpiresAt {
			// Renewed since it was placed. Its lease may expire only
			// after at + margin; settle it, and the items behind it,
			// while they come due up to settleAhead from now.
			if s.now+settleAhead <= top.at+p.margin {
				break
			}
			top.at = top.s.l.ExpiresAt
			heap.Fix(&s.expiry, 0)
			continue
		}
		if s.now <= top.at+p.margin {
			break
		}
		s.remove(a, top.s, EventExpired, "tick")
		n++
	}
	s.prune(&s.grants, p.keep)
	s.prune(&s.refusals, p.refusalKeep)
	return Result{Expired: n}
}

// prune forgets q's request ids older than keep.
func (s *State) prune(q *dedupQueue, keep int64) {
	for q.len() > 0 {
		d := &q.q[q.head]
		if s.now-d.at <= keep {
			break
		}
		delete(s.dedup, d.requestID)
		q.head++
	}
	q.compact()
}

// dedupEntry returns the entry of a sequence number from the dedup map.
func (s *State) dedupEntry(seq uint64) *dedupRef {
	if seq&refusalSeq != 0 {
		return s.refusals.get(seq &^ refusalSeq)
	}
	return s.grants.get(seq)
}

// addRefusal remembers a refused request id, first forgetting the oldest
// refusals while max (0: no cap) are remembered. Every replica evicts the
// same ones: max travels in the log entry.
func (s *State) addRefusal(a *Applied, d dedupRef, max uint64) {
	if max > 0 {
		for uint64(s.refusals.len()) >= max {
			delete(s.dedup, s.refusals.q[s.refusals.head].requestID)
			s.refusals.head++
			a.RefusalsEvicted++
		}
		s.refusals.compact()
	}
	s.dedup[d.requestID] = refusalSeq | s.refusals.push(d)
}

// remove deletes the lease in sl from every index and records the event.
func (s *State) remove(a *Applied, sl *leaseSlot, t EventType, reason string) {
	l := sl.l
	heap.Remove(&s.expiry, sl.heapIdx)
	if e := s.names[l.Resource]; e.counter == 0 {
		delete(s.names, l.Resource)
	} else {
		e.slot = nil
		s.names[l.Resource] = e
	}
	s.leases--
	s.countOwner(l.Holder, -1)
	delete(s.byID, l.ID)
	a.Events = append(a.Events, Event{Type: t, Lease: l.copy(), Reason: reason, Now: s.now})
}

// RaiseFloor prepares a state read from a backup to start a new cluster
// (a restore): it sets the token floor to
//
//	max(floor, highest counter of any scope) + bump
//
// and returns it. It fails with ErrTokenOverflow, changing nothing, when
// that passes 2^64-1.
//
// Why this beats every token the lost cluster issued, when bump is at
// least the number of grants any one scope made after the backup (the
// default bump, 2^32, is far above any such number): let H be max(floor,
// every counter) of the backup, so every token granted up to the backup is
// <= H. In a running cluster the floor never moves (only a restore, which
// starts another cluster, raises it), and a grant sets its scope's counter
// to max(counter, floor) + 1. A scope's counter at the backup is <= H (0 for
// a scope the backup never saw), so after k grants in it since the backup
// it is <= H + k: every token granted between the backup and the loss, in
// any scope, is <= H + g, g the most grants one scope made in that time.
// The restored cluster grants in every scope at least floor + 1 =
// H + bump + 1 > H + g. The state carries its floor into snapshots and
// hence backups, so a restore from a restored cluster's backup starts from
// there, never lower.
func (s *State) RaiseFloor(bump uint64) (uint64, error) {
	if s.knobs.planted(BugRestoreBumpsKnownScopes) {
		// The defect of issue 13: only the scopes the backup knows are
		// raised, the floor stays, a scope first used after the backup
		// starts again at 1.
		for scope, e := range s.names {
			if e.counter > ^uint64(0)-bump {
				return s.floor, fmt.Errorf("%w: scope %q at %d + bump %d", ErrTokenOverflow, scope, e.counter, bump)
			}
		}
		for scope, e := range s.names {
			if e.counter != 0 {
				e.counter += bump
				s.names[scope] = e
			}
		}
		return s.floor, nil
	}
	h := s.floor
	for _, e := range s.names {
		h = max(h, e.counter)
	}
	if h > ^uint64(0)-bump {
		return s.floor, fmt.Errorf("%w: highest token %d + bump %d", ErrTokenOverflow, h, bump)
	}
	s.floor = h + bump
	return s.floor, nil
}

// RaiseFloorTo prepares a state read from a backup as RaiseFloor does: it
// raises the token floor to at least atLeast (it never lowers it) and
// returns it. The cluster package passes its restore epoch's line
// (cluster/backup.go): every restore's floor then lies on or above a line
// that grows with time faster than any scope grants, so a later restore,
// of any backup, beats every token of an earlier restored cluster.
func (s *State) RaiseFloorTo(atLeast uint64) uint64 {
	if s.knobs.planted(BugRestoreBumpsKnownScopes) {
		return s.floor // issue 13's restore: no floor at all
	}
	s.floor = max(s.floor, atLeast)
	return s.floor
}

// DedupLen returns how many request ids the state remembers: grants and
// refusals.
func (s *State) DedupLen() (grants, refusals int) { return s.grants.len(), s.refusals.len() }

// EachRequestID calls fn for every request id the state remembers (not
// yet pruned), in the order they were made, with the cluster time of its
// outcome and the lease it produced, or, when refused, the lease that held
// the resource.
func (s *State) EachRequestID(fn func(requestID string, at int64, l Lease, refused bool)) {
	mergeDedup(s.grants.live(), s.refusals.live(), func(d *dedupRef) {
		fn(d.requestID, d.at, d.lease.copy(), d.refused)
	})
}

// mergeDedup calls fn for the entries of two queues in the order they
// were made (by at; a grant before a refusal of the same instant).
func mergeDedup(grants, refusals []dedupRef, fn func(d *dedupRef)) {
	for len(grants) > 0 || len(refusals) > 0 {
		if len(refusals) == 0 || (len(grants) > 0 && grants[0].at <= refusals[0].at) {
			fn(&grants[0])
			grants = grants[1:]
		} else {
			fn(&refusals[0])
			refusals = refusals[1:]
		}
	}
}
