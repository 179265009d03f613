package fsm

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// Snapshot format: a sequence of records, each a type byte, a uvarint body
// length and a protobuf body. The first record is the header, whose counts
// say how many of each record follow; the last is recEnd with an empty body.
// Record type numbers are append-only.
const (
	recHeader byte = 1
	recLease  byte = 2
	recScope  byte = 3
	recDedup  byte = 4
	recEnd    byte = 0xFF

	snapshotVersion = 1
	// maxRecordLen bounds one record so garbage cannot make Restore
	// allocate without limit.
	maxRecordLen = 1 << 20
)

// Snapshot is an immutable copy of a State taken by (*State).Snapshot. It
// is safe to persist from another goroutine while the State moves on.
type Snapshot struct {
	now    int64
	floor  uint64
	served []string // the State's is only ever replaced, never written in place
	leases []*Lease // records never change
	scopes []scopeCounter
	// grants and refusals share the State's queues: their elements never
	// change.
	grants, refusals []dedupRef
}

type scopeCounter struct {
	scope   string
	counter uint64
}

// Snapshot captures the state, cheaply enough to run under the node's
// lock at a million leases: lease records are never changed once made
// (renewal replaces them), so it copies a pointer to the record in each
// expiry heap item's slot; the request-id queues' elements are never
// written once appended, so it keeps a slice of each; only the counters
// are copied entry by entry. Nothing is encoded here: that is WriteTo's work, which
// may run on another goroutine while the State applies more entries.
func (s *State) Snapshot() *Snapshot {
	sn := &Snapshot{
		now:      s.now,
		floor:    s.floor,
		served:   s.served,
		leases:   make([]*Lease, len(s.expiry)),
		scopes:   make([]scopeCounter, 0, s.scopes),
		grants:   s.grants.live(),
		refusals: s.refusals.live(),
	}
	for i, it := range s.expiry {
		sn.leases[i] = it.s.l
	}
	for name, e := range s.names {
		c := e.counter
		if s.knobs.planted(BugSnapshotDropsCounters) {
			c = 0
			for _, l := range sn.leases {
				if l.Scope == name {
					c = max(c, l.Token)
				}
			}
		}
		if c != 0 {
			sn.scopes = append(sn.scopes, scopeCounter{name, c})
		}
	}
	return sn
}

// WithoutServed returns a copy of the snapshot that lists no served
// nodes, for a hash of the lease state alone.
func (sn *Snapshot) WithoutServed() *Snapshot {
	c := *sn
	c.served = nil
	return &c
}

// Legacy reports whether the snapshot holds a request-id entry restored
// from a snapshot written before entries carried their parameters
// (params_known unset). Such an entry encodes differently from the same
// entry made by applying its command, so two replicas with the same lease
// state may then write different bytes: a state check must not compare a
// hash of such a snapshot. It goes once the entry is pruned (at most
// dedup keep after it was made).
func (sn *Snapshot) Legacy() bool {
	for _, q := range [][]dedupRef{sn.grants, sn.refusals} {
		for i := range q {
			if q[i].legacy {
				return true
			}
		}
	}
	return false
}

// WriteTo encodes the snapshot deterministically: two States with the same
// content write the same bytes.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	slices.SortFunc(sn.leases, func(a, b *Lease) int { return strings.Compare(a.Resource, b.Resource) })
	slices.SortFunc(sn.scopes, func(a, b scopeCounter) int { return strings.Compare(a.scope, b.scope) })
	cw := &countingWriter{w: bufio.NewWriterSize(w, 64<<10)}
	enc := &recordWriter{w: cw}
	enc.write(recHeader, &fsmpb.SnapshotHeader{
		Version:     snapshotVersion,
		LastNowNs:   sn.now,
		LeaseCount:  uint64(len(sn.leases)),
		ScopeCount:  uint64(len(sn.scopes)),
		DedupCount:  uint64(len(sn.grants) + len(sn.refusals)),
		TokenFloor:  sn.floor,
		ServedNodes: sn.served,
	})
	// One message of each kind, refilled per record: encoding a million
	// leases allocates nothing per lease.
	var lrec fsmpb.LeaseRecord
	for _, l := range sn.leases {
		fillLeaseRecord(&lrec, l)
		enc.write(recLease, &lrec)
	}
	var srec fsmpb.ScopeRecord
	for _, sc := range sn.scopes {
		srec.Scope, srec.Counter = sc.scope, sc.counter
		enc.write(recScope, &srec)
	}
	// Grants, then refusals, each in the order they were made.
	drec := fsmpb.DedupRecord{Lease: &lrec}
	for _, q := range [][]dedupRef{sn.grants, sn.refusals} {
		for i := range q {
			d := &q[i]
			fillLeaseRecord(&lrec, d.lease)
			drec.RequestId, drec.AtNs, drec.Refused = d.requestID, d.at, d.refused
			drec.Wait, drec.Params, drec.ParamsKnown = d.wait, d.params, !d.legacy
			enc.write(recDedup, &drec)
		}
	}
	enc.writeRaw(recEnd, nil)
	if enc.err == nil {
		enc.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, enc.err
}

// fillLeaseRecord sets rec to l.
func fillLeaseRecord(rec *fsmpb.LeaseRecord, l *Lease) {
	rec.Id = l.ID[:]
	rec.Resource = l.Resource
	rec.Scope = l.Scope
	rec.Token = l.Token
	rec.Holder = l.Holder
	rec.TtlNs = l.TTL
	rec.GrantedAtNs = l.GrantedAt
	rec.ExpiresAtNs = l.ExpiresAt
}

// Restore reads a snapshot written by WriteTo and returns a fresh State.
// Any malformed input yields an error wrapping ErrCorruptSnapshot and no
// State; the caller's current state is untouched. The State is built with
// opts, as New builds one.
func Restore(r io.Reader, opts ...Option) (*State, error) {
	st, err := restore(bufio.NewReaderSize(r, 64<<10), opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	return st, nil
}

func restore(br *bufio.Reader, opts []Option) (*State, error) {
	dec := &recordReader{r: br}
	var hdr fsmpb.SnapshotHeader
	if err := dec.read(recHeader, &hdr); err != nil {
		return nil, err
	}
	if hdr.Version != snapshotVersion {
		return nil, fmt.Errorf("unsupported snapshot version %d", hdr.Version)
	}
	s := New(opts...)
	s.now = hdr.LastNowNs
	// A snapshot written before the floor existed has none: floor 0, the
	// state it was taken from.
	s.floor = hdr.TokenFloor
	for i, id := range hdr.ServedNodes {
		if err := ValidateName("served node", id); err != nil {
			return nil, err
		}
		if i > 0 && id <= hdr.ServedNodes[i-1] {
			return nil, fmt.Errorf("served nodes not sorted or listed twice at %q", id)
		}
	}
	s.served = hdr.ServedNodes
	for i := uint64(0); i < hdr.LeaseCount; i++ {
		var rec fsmpb.LeaseRecord
		if err := dec.read(recLease, &rec); err != nil {
			return nil, err
		}
		l, err := leaseFromRecord(&rec)
		if err != nil {
			return nil, fmt.Errorf("lease %d: %w", i, err)
		}
		if l.ExpiresAt-l.TTL > s.now {
			// Every expires_at was some now + ttl, and now never
			// decreases. The expiry heap relies on it: a renewal must not
			// move a lease's expiry earlier (heap.go).
			return nil, fmt.Errorf("lease %d: expires more than its ttl after the snapshot's time", i)
		}
		if s.names[l.Resource].slot != nil {
			return nil, fmt.Errorf("lease %d: resource %q held twice", i, l.Resource)
		}
		if _, dup := s.byID[l.ID]; dup {
			return nil, fmt.Errorf("lease %d: duplicate lease id", i)
		}
		s.expiry.Push(s.index(&l)) // in place; heap.Init orders them below
	}
	heap.Init(&s.expiry)
	for i := uint64(0); i < hdr.ScopeCount; i++ {
		var rec fsmpb.ScopeRecord
		if err := dec.read(recScope, &rec); err != nil {
			return nil, err
		}
		if err := ValidateName("scope", rec.Scope); err != nil {
			return nil, fmt.Errorf("scope %d: %w", i, err)
		}
		if rec.Counter == 0 {
			// No State holds a scope that has issued no token.
			return nil, fmt.Errorf("scope %q has counter 0", rec.Scope)
		}
		e := s.names[rec.Scope]
		if e.counter != 0 {
			return nil, fmt.Errorf("scope %q listed twice", rec.Scope)
		}
		e.counter = rec.Counter
		s.names[rec.Scope] = e
		s.scopes++
	}
	for _, it := range s.expiry {
		l := it.s.l
		if c := s.names[l.Scope].counter; l.Token > c {
			return nil, fmt.Errorf("lease on %q has token %d above its scope counter %d", l.Resource, l.Token, c)
		}
	}
	var lastAt [2]int64 // of grants, of refusals
	for i := uint64(0); i < hdr.DedupCount; i++ {
		var rec fsmpb.DedupRecord
		if err := dec.read(recDedup, &rec); err != nil {
			return nil, err
		}
		if err := ValidateRequestID(rec.RequestId); err != nil || rec.RequestId == "" {
			return nil, fmt.Errorf("dedup %d: bad request id", i)
		}
		if rec.Lease == nil {
			return nil, fmt.Errorf("dedup %d: no lease", i)
		}
		l, err := leaseFromRecord(rec.Lease)
		if err != nil {
			return nil, fmt.Errorf("dedup %d: %w", i, err)
		}
		kind := 0
		if rec.Refused {
			kind = 1
		}
		if rec.AtNs < lastAt[kind] {
			return nil, fmt.Errorf("dedup %d: out of order", i)
		}
		lastAt[kind] = rec.AtNs
		if rec.Refused && rec.Wait {
			return nil, fmt.Errorf("dedup %d: a waiting acquire's refusal", i)
		}
		if !rec.ParamsKnown && (rec.Wait || rec.Params != 0) {
			return nil, fmt.Errorf("dedup %d: parameters without params_known", i)
		}
		if _, dup := s.dedup[rec.RequestId]; dup {
			return nil, fmt.Errorf("dedup %d: request id listed twice", i)
		}
		// Share the held lease's record when it is this grant, not renewed
		// since; otherwise keep a record of its own, outside every index.
		// An entry of a version that did not record parameters compares
		// what its record holds (dedupRef.sameRequest).
		d := dedupRef{requestID: rec.RequestId, at: rec.AtNs, refused: rec.Refused, wait: rec.Wait, params: rec.Params, legacy: !rec.ParamsKnown}
		if held, ok := s.byID[l.ID]; ok && *held.l == l {
			d.lease = held.l
		} else {
			own := l
			d.lease = &own
		}
		if d.refused {
			s.dedup[d.requestID] = refusalSeq | s.refusals.push(d)
		} else {
			s.dedup[d.requestID] = s.grants.push(d)
		}
	}
	if err := dec.readEnd(); err != nil {
		return nil, err
	}
	return s, nil
}

func leaseFromRecord(rec *fsmpb.LeaseRecord) (Lease, error) {
	if err := ValidateLeaseID(rec.Id); err != nil {
		return Lease{}, err
	}
	if err := ValidateName("resource", rec.Resource); err != nil {
		return Lease{}, err
	}
	if err := ValidateName("scope", rec.Scope); err != nil {
		return Lease{}, err
	}
	if err := ValidateHolder(rec.Holder); err != nil {
		return Lease{}, err
	}
	if rec.Token == 0 || rec.TtlNs <= 0 || rec.ExpiresAtNs < rec.GrantedAtNs {
		return Lease{}, errors.New("impossible token or times")
	}
	l := Lease{
		Resource:  rec.Resource,
		Scope:     rec.Scope,
		Token:     rec.Token,
		Holder:    rec.Holder,
		TTL:       rec.TtlNs,
		GrantedAt: rec.GrantedAtNs,
		ExpiresAt: rec.ExpiresAtNs,
	}
	copy(l.ID[:], rec.Id)
	return l, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// recordWriter writes records and keeps the first error.
type recordWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func (e *recordWriter) write(t byte, m proto.Message) {
	if e.err != nil {
		return
	}
	body, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(e.buf[:0], m)
	if err != nil {
		e.err = err
		return
	}
	e.buf = body
	e.writeRaw(t, body)
}

func (e *recordWriter) writeRaw(t byte, body []byte) {
	if e.err != nil {
		return
	}
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = t
	n := binary.PutUvarint(hdr[1:], uint64(len(body)))
	if _, e.err = e.w.Write(hdr[:1+n]); e.err != nil {
		return
	}
	_, e.err = e.w.Write(body)
}

type recordReader struct {
	r   *bufio.Reader
	buf []byte
}

func (d *recordReader) next() (byte, []byte, error) {
	t, err := d.r.ReadByte()
	if err != nil {
		return 0, nil, fmt.Errorf("reading record type: %w", err)
	}
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, nil, fmt.Errorf("reading record length: %w", err)
	}
	if n > maxRecordLen {
		return 0, nil, fmt.Errorf("record of %d bytes exceeds %d", n, maxRecordLen)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	d.buf = d.buf[:n]
	if _, err := io.ReadFull(d.r, d.buf); err != nil {
		return 0, nil, fmt.Errorf("reading record body: %w", err)
	}
	return t, d.buf, nil
}

func (d *recordReader) read(want byte, m proto.Message) error {
	t, body, err := d.next()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("record type %d where %d was expected", t, want)
	}
	if err := proto.Unmarshal(body, m); err != nil {
		return fmt.Errorf("record type %d: %w", t, err)
	}
	// Fields this version does not know may hold state it cannot keep
	// (a newer version's snapshot): refuse rather than drop them.
	if hasUnknown(m.ProtoReflect()) {
		return fmt.Errorf("record type %d has fields this version does not know", t)
	}
	return nil
}

// hasUnknown reports whether m or any message inside it carries unknown
// fields.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

func (d *recordReader) readEnd() error {
	t, body, err := d.next()
	if err != nil {
		return err
	}
	if t != recEnd || len(body) != 0 {
		return fmt.Errorf("missing end record")
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("trailing bytes after end record")
	}
	return nil
}
