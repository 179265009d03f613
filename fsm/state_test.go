package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

const (
	testMargin = int64(500 * time.Millisecond)
	testKeep   = int64(70 * time.Second)
	sec        = int64(time.Second)
)

func leaseID(b byte) []byte {
	id := make([]byte, LeaseIDLen)
	id[0] = b
	id[15] = 0xAA
	return id
}

func acquireCmd(resource string, ttl int64, id byte, reqID string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
		Resource: resource, Holder: "h-" + resource, TtlNs: ttl, RequestId: reqID, LeaseId: leaseID(id),
	}}}
}

func renewCmd(id byte) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: leaseID(id)}}}
}

func releaseCmd(id byte) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: leaseID(id)}}}
}

func tickCmd() *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: 1000}}}
}

func entry(t testing.TB, now int64, cmds ...*fsmpb.Command) []byte {
	t.Helper()
	b, err := EncodeBatch(&fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: testKeep, Commands: cmds})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// apply applies one command at now and returns its result.
func apply(t testing.TB, s *State, now int64, c *fsmpb.Command) Result {
	t.Helper()
	a, err := s.Apply(entry(t, now, c))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return a.Results[0]
}

func TestAcquireHeldReleaseAcquireIssuesNextToken(t *testing.T) {
	s := New()
	r := apply(t, s, 1*sec, acquireCmd("jobs/1", 10*sec, 1, ""))
	if r.Err != nil || r.Lease.Token != 1 {
		t.Fatalf("first acquire: %+v", r)
	}
	if r.Remaining != 10*time.Second {
		t.Fatalf("remaining = %v, want 10s", r.Remaining)
	}
	r = apply(t, s, 2*sec, acquireCmd("jobs/1", 10*sec, 2, ""))
	var held *HeldError
	if !errors.As(r.Err, &held) || !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("second acquire: want HeldError, got %v", r.Err)
	}
	if held.Token != 1 || held.Holder != "h-jobs/1" || held.TimeLeft != time.Duration(9*sec+testMargin) {
		t.Fatalf("held detail: %+v", held)
	}
	r = apply(t, s, 3*sec, releaseCmd(1))
	if !r.Released {
		t.Fatalf("release: %+v", r)
	}
	r = apply(t, s, 3*sec, releaseCmd(1))
	if r.Released || r.Err != nil {
		t.Fatalf("second release must report released=false without error: %+v", r)
	}
	r = apply(t, s, 4*sec, acquireCmd("jobs/1", 10*sec, 3, ""))
	if r.Err != nil || r.Lease.Token != 2 {
		t.Fatalf("acquire after release: %+v", r)
	}
}

func TestRenewKeepsTokenAndExtends(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("r", 10*sec, 1, ""))
	r := apply(t, s, 9*sec, renewCmd(1))
	if r.Err != nil || r.Lease.Token != 1 || r.Lease.ExpiresAt != 19*sec || r.Remaining != 10*time.Second {
		t.Fatalf("renew: %+v", r)
	}
}

func TestRenewAfterExpiryGetsHigherToken(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("r", 10*sec, 1, ""))
	// Exactly at expires_at the lease may still be renewed.
	if r := apply(t, s, 10*sec, renewCmd(1)); r.Err != nil {
		t.Fatalf("renew at expires_at: %v", r.Err)
	}
	r := apply(t, s, 20*sec+1, renewCmd(1))
	if !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("renew after expiry: want ErrNotFound, got %+v", r)
	}
	// Within the skew margin after expiry the resource is still held...
	if r := apply(t, s, 20*sec+testMargin, acquireCmd("r", 10*sec, 2, "")); !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("acquire within margin: want ErrHeld, got %+v", r)
	}
	// ...and past it, the same holder gets a higher token.
	r = apply(t, s, 20*sec+testMargin+1, acquireCmd("r", 10*sec, 3, ""))
	if r.Err != nil || r.Lease.Token != 2 {
		t.Fatalf("acquire after expiry: %+v", r)
	}
}

func TestReleaseOfExpiredLeaseReportsFalse(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("r", 10*sec, 1, ""))
	if r := apply(t, s, 11*sec, releaseCmd(1)); r.Released {
		t.Fatalf("release after expiry must report false: %+v", r)
	}
}

func TestTickExpiresOnlyPastMarginEarliestFirst(t *testing.T) {
	s := New()
	a, err := s.Apply(entry(t, 0,
		acquireCmd("a", 5*sec, 1, ""),
		acquireCmd("b", 3*sec, 2, ""),
		acquireCmd("c", 9*sec, 3, "")))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 3 {
		t.Fatalf("events: %d", len(a.Events))
	}
	a, err = s.Apply(entry(t, 5*sec+testMargin+1, tickCmd()))
	if err != nil {
		t.Fatal(err)
	}
	if a.Results[0].Expired != 2 || len(a.Events) != 2 || a.Events[0].Lease.Resource != "b" || a.Events[1].Lease.Resource != "a" {
		t.Fatalf("tick: %+v", a)
	}
	if _, ok := s.Lease("c"); !ok || s.Len() != 1 {
		t.Fatalf("c must remain")
	}
	// A tick with a limit expires at most that many.
	s2 := New()
	for i := 0; i < 5; i++ {
		apply(t, s2, 0, acquireCmd(string(rune('a'+i)), 2*sec, byte(i+1), ""))
	}
	a, _ = s2.Apply(entry(t, 10*sec, &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: 2}}}))
	if a.Results[0].Expired != 2 || s2.Len() != 3 {
		t.Fatalf("limited tick expired %d, left %d", a.Results[0].Expired, s2.Len())
	}
}

func TestDuplicateRequestIDYieldsOneLease(t *testing.T) {
	s := New()
	r1 := apply(t, s, 0, acquireCmd("r", 10*sec, 1, "req-1"))
	r2 := apply(t, s, 4*sec, acquireCmd("r", 10*sec, 2, "req-1"))
	if !r2.Replayed || r2.Lease.ID != r1.Lease.ID || r2.Lease.Token != r1.Lease.Token {
		t.Fatalf("replay: %+v vs %+v", r2, r1)
	}
	if r2.Remaining != 6*time.Second {
		t.Fatalf("replayed remaining must be measured at the replay's stamp: %v", r2.Remaining)
	}
	if s.ScopeCounter("r") != 1 {
		t.Fatalf("counter advanced on replay: %d", s.ScopeCounter("r"))
	}
	// The same id for another resource is refused.
	if r := apply(t, s, 5*sec, acquireCmd("other", 10*sec, 3, "req-1")); !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("reuse: %+v", r)
	}
	// After release, a replay still returns the first outcome, with no time left.
	apply(t, s, 6*sec, releaseCmd(1))
	r3 := apply(t, s, 7*sec, acquireCmd("r", 10*sec, 4, "req-1"))
	if !r3.Replayed || r3.Lease.Token != 1 || r3.Remaining != 0 {
		t.Fatalf("replay after release: %+v", r3)
	}
	// Dedup entries are pruned after dedup_keep.
	apply(t, s, testKeep+1*sec, tickCmd())
	r4 := apply(t, s, testKeep+1*sec, acquireCmd("r", 10*sec, 5, "req-1"))
	if r4.Replayed || r4.Lease.Token != 2 {
		t.Fatalf("after prune: %+v", r4)
	}
}

func TestReplayAfterRenewAndReleaseReturnsTheLeaseAsGranted(t *testing.T) {
	s := New()
	r1 := apply(t, s, 0, acquireCmd("r", 10*sec, 1, "req-1"))
	apply(t, s, 5*sec, renewCmd(1))
	// While held, a replay reports the lease as it is now.
	if r := apply(t, s, 6*sec, acquireCmd("r", 10*sec, 2, "req-1")); !r.Replayed || r.Lease.ExpiresAt != 15*sec || r.Remaining != 9*time.Second {
		t.Fatalf("replay while held: %+v", r)
	}
	apply(t, s, 7*sec, releaseCmd(1))
	check := func(s *State, now int64) {
		t.Helper()
		r := apply(t, s, now, acquireCmd("r", 10*sec, 3, "req-1"))
		if !r.Replayed || r.Lease != r1.Lease || r.Remaining != 0 {
			t.Fatalf("replay after release: %+v, granted %+v", r, r1)
		}
	}
	check(s, 8*sec)
	// The same after a snapshot round trip.
	r, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	check(r, 9*sec)
}

// A Snapshot shares lease records and the request-id queue with the State:
// whatever the State applies afterwards (renewals, releases, grants, expiry,
// request-id pruning and the queue's compaction) must not change what the
// Snapshot writes, also while it writes (go test -race).
func TestSnapshotIsUnchangedByLaterApplies(t *testing.T) {
	s := New()
	const n = 3000
	var cmds []*fsmpb.Command
	for i := 0; i < n; i++ {
		cmds = append(cmds, benchAcquire(uint64(i), fmt.Sprintf("jobs/%d", i)))
	}
	if _, err := s.Apply(entry(t, sec, cmds...)); err != nil {
		t.Fatal(err)
	}
	renewAll := func(now int64, from, to int) []byte {
		var cmds []*fsmpb.Command
		for i := from; i < to; i++ {
			cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: benchID(uint64(i))}}})
		}
		return entry(t, now, cmds...)
	}
	if _, err := s.Apply(renewAll(2*sec, 0, n/2)); err != nil {
		t.Fatal(err)
	}
	want := snapshotBytes(t, s)
	sn := s.Snapshot()
	later := [][]byte{renewAll(3*sec, 0, n)}
	var rel []*fsmpb.Command
	for i := 0; i < n; i += 3 {
		rel = append(rel, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: benchID(uint64(i))}}})
	}
	later = append(later, entry(t, 4*sec, rel...))
	later = append(later, entry(t, 5*sec, benchAcquire(n+1, "jobs/new")))
	// Past dedup_keep: every request id pruned, the queue compacted, the
	// leases expired.
	later = append(later, entry(t, testKeep+20*sec, tickCmd(), tickCmd(), tickCmd(), tickCmd()))
	done := make(chan []byte)
	go func() {
		var buf bytes.Buffer
		if _, err := sn.WriteTo(&buf); err != nil {
			t.Error(err)
		}
		done <- buf.Bytes()
	}()
	for _, e := range later {
		if _, err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := <-done; !bytes.Equal(got, want) {
		t.Fatal("the snapshot changed with applies made after it was taken")
	}
	if s.Len() != 0 || len(s.dedup) != 0 || s.grants.head != 0 {
		t.Fatalf("the later applies did not expire and prune everything: %d leases, %d ids, head %d", s.Len(), len(s.dedup), s.grants.head)
	}
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("the snapshot changed after all the applies", err)
	}
}

func TestExplicitScopeSharesSequence(t *testing.T) {
	s := New()
	c1 := acquireCmd("a", 10*sec, 1, "")
	c1.GetAcquire().Scope = "shard-7"
	c2 := acquireCmd("b", 10*sec, 2, "")
	c2.GetAcquire().Scope = "shard-7"
	r1, r2 := apply(t, s, 0, c1), apply(t, s, 0, c2)
	if r1.Lease.Token != 1 || r2.Lease.Token != 2 || r2.Lease.Scope != "shard-7" {
		t.Fatalf("shared scope: %+v %+v", r1.Lease, r2.Lease)
	}
	if r := apply(t, s, 0, acquireCmd("c", 10*sec, 3, "")); r.Lease.Token != 1 {
		t.Fatalf("default scope is the resource: %+v", r.Lease)
	}
}

func TestClusterTimeNeverRunsBackwards(t *testing.T) {
	s := New()
	apply(t, s, 10*sec, tickCmd())
	r := apply(t, s, 5*sec, acquireCmd("r", 10*sec, 1, ""))
	if r.Lease.GrantedAt != 10*sec || s.Now() != 10*sec {
		t.Fatalf("stamp behind last applied time must be raised: %+v now=%d", r.Lease, s.Now())
	}
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), MaxNameLen+1))
	cases := []struct {
		name  string
		cmd   *fsmpb.Command
		field string
	}{
		{"empty resource", acquireCmd("", 10*sec, 1, ""), "resource"},
		{"oversized resource", acquireCmd(long, 10*sec, 1, ""), "resource"},
		{"control character", acquireCmd("a\x00b", 10*sec, 1, ""), "resource"},
		{"newline", acquireCmd("a\nb", 10*sec, 1, ""), "resource"},
		{"zero ttl", acquireCmd("r", 0, 1, ""), "ttl"},
		{"ttl under twice the margin", acquireCmd("r", 2*testMargin, 1, ""), "ttl"},
		{"short lease id", &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Resource: "r", TtlNs: 10 * sec, LeaseId: []byte{1}}}}, "lease_id"},
		{"renew bad id", &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: []byte{1, 2}}}}, "lease_id"},
		{"release bad id", &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{}}}, "lease_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			before := snapshotBytes(t, s)
			r := apply(t, s, 0, tc.cmd)
			var fe *FieldError
			if !errors.As(r.Err, &fe) || fe.Field != tc.field || !errors.Is(r.Err, ErrInvalidArgument) {
				t.Fatalf("want FieldError on %s, got %v", tc.field, r.Err)
			}
			s.now = 0 // the stamp itself is not a change of lease state
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("state changed on bad input")
			}
		})
	}
	t.Run("unknown renew id", func(t *testing.T) {
		s := New()
		if r := apply(t, s, 0, renewCmd(9)); !errors.Is(r.Err, ErrNotFound) {
			t.Fatalf("got %v", r.Err)
		}
	})
}

func TestCorruptEntriesAreRefusedWithoutPanicOrChange(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("r", 10*sec, 1, ""))
	before := snapshotBytes(t, s)
	unknownOp := entry(t, 1*sec, acquireCmd("x", 10*sec, 2, ""), &fsmpb.Command{})
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorruptEntry},
		{"garbage protobuf", []byte{byte(EntryBatch), 0xff, 0xff, 0xff}, ErrCorruptEntry},
		{"truncated", entry(t, 1, acquireCmd("y", 10*sec, 3, ""))[:10], ErrCorruptEntry},
		{"unknown type", []byte{0x07, 1, 2}, ErrUnknownEntry},
		{"command without known op", unknownOp, ErrUnknownEntry},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := s.Apply(tc.data)
			if !errors.Is(err, tc.want) || a != nil {
				t.Fatalf("want %v, got %v (%v)", tc.want, err, a)
			}
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("state changed")
			}
		})
	}
	t.Run("unknown ignorable type is skipped", func(t *testing.T) {
		const typ = EntryIgnorable | 0x05
		e := []byte{byte(typ), 0, 0, 0, 0, 1, 2, 3}
		binary.BigEndian.PutUint32(e[1:], entryChecksum(typ, e[5:]))
		a, err := s.Apply(e)
		if err != nil || len(a.Results) != 0 {
			t.Fatalf("got %v %v", a, err)
		}
	})
}

func snapshotBytes(t interface{ Fatal(...any) }, s *State) []byte {
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTripEveryRecordType(t *testing.T) {
	s := New()
	c := acquireCmd("a", 10*sec, 1, "req-a")
	c.GetAcquire().Scope = "shard"
	apply(t, s, 1*sec, c)
	apply(t, s, 2*sec, acquireCmd("b", 10*sec, 2, "req-b"))
	apply(t, s, 3*sec, releaseCmd(2))
	apply(t, s, 3*sec, acquireCmd("b", 10*sec, 3, ""))
	raw := snapshotBytes(t, s)
	r, err := Restore(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, snapshotBytes(t, r)) {
		t.Fatal("restored state differs")
	}
	if r.Now() != 3*sec || r.ScopeCounter("shard") != 1 || r.ScopeCounter("b") != 2 || r.Len() != 2 {
		t.Fatalf("restored: now=%d", r.Now())
	}
	// The dedup table survived: a replay is still recognised.
	c.GetAcquire().LeaseId = leaseID(9)
	if res := apply(t, r, 4*sec, c); !res.Replayed || res.Err != nil {
		t.Fatalf("dedup lost in snapshot: %+v", res)
	}
	// The expiry heap was rebuilt: expiry still works after restore.
	a, _ := r.Apply(entry(t, 30*sec, tickCmd()))
	if a.Results[0].Expired != 2 || r.Len() != 0 {
		t.Fatalf("expiry after restore: %+v", a.Results[0])
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("a", 10*sec, 1, "req"))
	good := snapshotBytes(t, s)
	cases := map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)-3],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"garbage":        []byte("not a snapshot at all"),
		"huge length":    {recHeader, 0xff, 0xff, 0xff, 0xff, 0x0f},
		// A header with a field this version does not know (found by
		// FuzzRestore, with field 6, since then token_floor; here 15):
		// refused, not silently dropped.
		"unknown field": []byte("\x01\x0e\b\x01x\x80\xa8\xd6\xb90x\x80\x8c\xee\x890\xff\x00"),
		// A scope that issued no token: no State holds one.
		"scope counter 0": snapshotWith(t, 0, nil, []*fsmpb.ScopeRecord{{Scope: "s", Counter: 0}}),
		// Expires 20s, more than its ttl (10s) after the snapshot's 5s: no
		// State made it, and a renewal would move its expiry earlier.
		"expiry beyond now + ttl": snapshotWith(t, 5*sec,
			[]*fsmpb.LeaseRecord{{Id: leaseID(1), Resource: "a", Scope: "a", Token: 1, Holder: "h", TtlNs: 10 * sec, ExpiresAtNs: 20 * sec}},
			[]*fsmpb.ScopeRecord{{Scope: "a", Counter: 1}}),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := Restore(bytes.NewReader(data))
			if !errors.Is(err, ErrCorruptSnapshot) || r != nil {
				t.Fatalf("want ErrCorruptSnapshot, got %v", err)
			}
		})
	}
}

func TestRefusedRequestIDStaysRefused(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("r", 10*sec, 1, "holder"))
	r1 := apply(t, s, 1*sec, acquireCmd("r", 10*sec, 2, "late"))
	var held *HeldError
	if !errors.As(r1.Err, &held) || held.Token != 1 {
		t.Fatalf("first attempt: %+v", r1)
	}
	apply(t, s, 2*sec, releaseCmd(1))
	// The late copy of the refused request arrives with the resource free.
	r2 := apply(t, s, 3*sec, acquireCmd("r", 10*sec, 3, "late"))
	if !errors.As(r2.Err, &held) || !r2.Replayed || held.Token != 1 || held.TimeLeft != 0 {
		t.Fatalf("late copy of a refused request: %+v", r2)
	}
	if _, ok := s.Lease("r"); ok || s.ScopeCounter("r") != 1 {
		t.Fatalf("late copy changed the state: counter %d", s.ScopeCounter("r"))
	}
	// The refusal survives a snapshot.
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	if r := apply(t, restored, 4*sec, acquireCmd("r", 10*sec, 4, "late")); !errors.As(r.Err, &held) || !r.Replayed {
		t.Fatalf("after restore: %+v", r)
	}
	// A waiting acquire's refusals are not remembered: the leader proposes
	// the same request again when the resource frees.
	apply(t, s, 5*sec, acquireCmd("r", 10*sec, 5, "holder2"))
	w := acquireCmd("r", 10*sec, 6, "waiter")
	w.GetAcquire().Wait = true
	if r := apply(t, s, 6*sec, w); !errors.As(r.Err, &held) {
		t.Fatalf("waiter while held: %+v", r)
	}
	apply(t, s, 7*sec, releaseCmd(5))
	if r := apply(t, s, 8*sec, w); r.Err != nil || r.Lease.Token != 3 {
		t.Fatalf("waiter after release: %+v", r)
	}
	// Refusals are pruned after dedup_keep like grants.
	apply(t, s, testKeep+9*sec, tickCmd())
	apply(t, s, testKeep+9*sec, releaseCmd(6))
	if r := apply(t, s, testKeep+10*sec, acquireCmd("r", 10*sec, 7, "late")); r.Err != nil || r.Replayed {
		t.Fatalf("after prune: %+v", r)
	}
}

// snapshotWith encodes a snapshot of the given records (any of them
// possibly invalid).
func snapshotWith(t *testing.T, now int64, leases []*fsmpb.LeaseRecord, scopes []*fsmpb.ScopeRecord) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := &recordWriter{w: &buf}
	enc.write(recHeader, &fsmpb.SnapshotHeader{Version: snapshotVersion, LastNowNs: now, LeaseCount: uint64(len(leases)), ScopeCount: uint64(len(scopes))})
	for _, l := range leases {
		enc.write(recLease, l)
	}
	for _, sc := range scopes {
		enc.write(recScope, sc)
	}
	enc.writeRaw(recEnd, nil)
	if enc.err != nil {
		t.Fatal(enc.err)
	}
	return buf.Bytes()
}
