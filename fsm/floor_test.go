package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// restoreHistory draws random batches for the restore property: acquires
// over a pool of resources (some sharing explicit scopes), renewals,
// releases and ticks, with lease ids that never repeat.
type restoreHistory struct {
	now    int64
	nextID int
	ids    [][]byte
}

// batch draws one entry; only resources and scopes of the first `names`
// pool entries are used, so a later phase can bring in names never seen.
func (h *restoreHistory) batch(rt *rapid.T, names int) []byte {
	h.now += sec * rapid.Int64Range(0, 3).Draw(rt, "advance")
	n := rapid.IntRange(1, 4).Draw(rt, "batch")
	cmds := make([]*fsmpb.Command, 0, n)
	for i := 0; i < n; i++ {
		switch rapid.IntRange(0, 7).Draw(rt, "op") {
		case 0, 1, 2, 3:
			h.nextID++
			id := make([]byte, LeaseIDLen)
			id[0], id[1], id[2] = byte(h.nextID), byte(h.nextID>>8), 0xF1
			h.ids = append(h.ids, id)
			a := &fsmpb.Acquire{
				Resource: fmt.Sprintf("r%d", rapid.IntRange(0, names-1).Draw(rt, "resource")),
				Holder:   "w",
				TtlNs:    rapid.SampledFrom([]int64{2 * sec, 5 * sec}).Draw(rt, "ttl"),
				LeaseId:  id,
			}
			if rapid.IntRange(0, 2).Draw(rt, "explicit scope") == 0 {
				a.Scope = fmt.Sprintf("s%d", rapid.IntRange(0, names-1).Draw(rt, "scope"))
			}
			cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}})
		case 4:
			if len(h.ids) > 0 {
				cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: rapid.SampledFrom(h.ids).Draw(rt, "id")}}})
			}
		case 5, 6:
			if len(h.ids) > 0 {
				cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: rapid.SampledFrom(h.ids).Draw(rt, "id")}}})
			}
		default:
			cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{}}})
		}
	}
	raw, err := EncodeBatch(&fsmpb.Batch{NowNs: h.now, SkewMarginNs: testMargin, DedupKeepNs: testKeep, Commands: cmds})
	if err != nil {
		rt.Fatal(err)
	}
	return raw
}

// applyGrants applies raw to s and returns the leases it granted.
func applyGrants(rt *rapid.T, s *State, raw []byte) []Lease {
	a, err := s.Apply(raw)
	if err != nil {
		rt.Fatal(err)
	}
	var out []Lease
	for _, ev := range a.Events {
		if ev.Type == EventGranted {
			out = append(out, ev.Lease)
		}
	}
	return out
}

// checkRestoreBeatsLostTokens runs one random disaster: a history over
// several scopes, a backup (snapshot bytes) at a random point, more
// history (new scopes included) that the backup never sees, the loss;
// then a new state restored from the backup with its floor raised by a
// bump at least the grants any one scope made after the backup (so a bump
// above all grants after it is covered too), and more
// history. It returns a description of the first token granted after the
// restore that does not beat every token granted before the loss (in its
// scope, or in any scope), or "" when there is none. Both states are
// built with opts.
func checkRestoreBeatsLostTokens(rt *rapid.T, opts ...Option) string {
	h := &restoreHistory{}
	s := New(opts...)
	lost := map[string]uint64{} // scope -> highest token granted before the loss
	var lostMax uint64
	grant := func(ls []Lease) {
		for _, l := range ls {
			lost[l.Scope] = max(lost[l.Scope], l.Token)
			lostMax = max(lostMax, l.Token)
		}
	}
	for i, n := 0, rapid.IntRange(0, 30).Draw(rt, "before backup"); i < n; i++ {
		grant(applyGrants(rt, s, h.batch(rt, 3)))
	}
	backup := snapshotBytes(rt, s)
	after := map[string]uint64{} // scope -> grants between the backup and the loss
	var most uint64              // the most grants one scope made in that time
	for i, n := 0, rapid.IntRange(0, 30).Draw(rt, "after backup"); i < n; i++ {
		ls := applyGrants(rt, s, h.batch(rt, 6))
		for _, l := range ls {
			after[l.Scope]++
			most = max(most, after[l.Scope])
		}
		grant(ls)
	}

	r, err := Restore(bytes.NewReader(backup), opts...)
	if err != nil {
		rt.Fatal(err)
	}
	// The bump need only reach the grants of the busiest scope (see
	// RaiseFloor), which is at most all grants after the backup.
	bump := most + rapid.Uint64Range(0, 1000).Draw(rt, "bump beyond the busiest scope's grants after the backup")
	if err := restoreRaise(r, bump); err != nil {
		rt.Fatal(err)
	}
	for i, n := 0, rapid.IntRange(1, 30).Draw(rt, "after restore"); i < n; i++ {
		for _, l := range applyGrants(rt, r, h.batch(rt, 8)) {
			if l.Token <= lost[l.Scope] {
				return fmt.Sprintf("after the restore (bump %d, at most %d grants per scope after the backup) scope %q granted token %d; it had granted %d before the loss", bump, most, l.Scope, l.Token, lost[l.Scope])
			}
			if l.Token <= lostMax {
				return fmt.Sprintf("after the restore (bump %d, at most %d grants per scope after the backup) scope %q granted token %d; tokens up to %d were granted before the loss", bump, most, l.Scope, l.Token, lostMax)
			}
		}
	}
	return ""
}

// restoreRaise is what a restore does to the state read from a backup.
func restoreRaise(s *State, bump uint64) error {
	_, err := s.RaiseFloor(bump)
	return err
}

// TestRestoreFromBackupBeatsEveryLostToken is issue 13 §1 as a property:
// every token granted after a restore exceeds every token granted before
// the loss, in scopes the backup knows and in scopes first used after it.
func TestRestoreFromBackupBeatsEveryLostToken(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		if v := checkRestoreBeatsLostTokens(rt); v != "" {
			rt.Fatal(v)
		}
	})
}

func TestRaiseFloorBeatsEveryScopeKnownOrNot(t *testing.T) {
	s := New()
	c := acquireCmd("a", 10*sec, 1, "")
	c.GetAcquire().Scope = "shard"
	apply(t, s, 0, c)
	apply(t, s, 0, acquireCmd("b", 10*sec, 2, ""))
	apply(t, s, 0, releaseCmd(2))
	apply(t, s, 0, acquireCmd("b", 10*sec, 3, "")) // b: 2, shard: 1
	floor, err := s.RaiseFloor(1 << 32)
	if err != nil || floor != 2+1<<32 || s.Floor() != floor {
		t.Fatalf("RaiseFloor = %d, %v; Floor() = %d", floor, err, s.Floor())
	}
	// The counters are the history's; the floor is what new grants beat.
	if s.ScopeCounter("shard") != 1 || s.ScopeCounter("b") != 2 {
		t.Fatalf("counters %d %d", s.ScopeCounter("shard"), s.ScopeCounter("b"))
	}
	if s.ScopeToken("b") != floor || s.ScopeToken("never-seen") != floor {
		t.Fatalf("scope tokens %d %d, floor %d", s.ScopeToken("b"), s.ScopeToken("never-seen"), floor)
	}
	apply(t, s, 0, releaseCmd(3))
	for i, res := range []string{"b", "never-seen", "b"} {
		apply(t, s, 0, releaseCmd(byte(10+i-1)))
		r := apply(t, s, 0, acquireCmd(res, 10*sec, byte(10+i), ""))
		if want := floor + 1 + uint64(i/2); r.Err != nil || r.Lease.Token != want {
			t.Fatalf("grant %d on %s: token %d (%v), want %d", i, res, r.Lease.Token, r.Err, want)
		}
	}
	// A second restore starts from the highest of floor and counters.
	if floor2, err := s.RaiseFloor(10); err != nil || floor2 != floor+2+10 {
		t.Fatalf("second RaiseFloor = %d, %v, want %d", floor2, err, floor+2+10)
	}
	// A zero bump still puts every new scope above every token issued.
	z := New()
	apply(t, z, 0, acquireCmd("x", 10*sec, 1, ""))
	if f, err := z.RaiseFloor(0); err != nil || f != 1 {
		t.Fatalf("RaiseFloor(0) = %d, %v", f, err)
	}
	if r := apply(t, z, 0, acquireCmd("y", 10*sec, 2, "")); r.Lease.Token != 2 {
		t.Fatalf("token after a zero bump: %d", r.Lease.Token)
	}
}

// RaiseFloorTo only ever raises the floor; every scope then draws above
// it, known or not.
func TestRaiseFloorToOnlyRaises(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("a", 10*sec, 1, ""))
	if f, err := s.RaiseFloor(100); err != nil || f != 101 {
		t.Fatalf("RaiseFloor(100) = %d, %v", f, err)
	}
	if f := s.RaiseFloorTo(50); f != 101 {
		t.Fatalf("RaiseFloorTo(50) over floor 101 = %d: lowered", f)
	}
	if f := s.RaiseFloorTo(1 << 40); f != 1<<40 || s.Floor() != 1<<40 {
		t.Fatalf("RaiseFloorTo(2^40) = %d, Floor %d", f, s.Floor())
	}
	if r := apply(t, s, 0, acquireCmd("new", 10*sec, 2, "")); r.Lease.Token != 1<<40+1 {
		t.Fatalf("a new scope after RaiseFloorTo: token %d", r.Lease.Token)
	}
}

func TestRaiseFloorRefusesOverflowAndChangesNothing(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("a", 10*sec, 1, ""))
	if _, err := s.RaiseFloor(^uint64(0) - 2); err != nil { // floor 2^64-2
		t.Fatal(err)
	}
	before := snapshotBytes(t, s)
	for _, bump := range []uint64{2, ^uint64(0)} {
		f, err := s.RaiseFloor(bump)
		if !errors.Is(err, ErrTokenOverflow) || f != ^uint64(0)-1 {
			t.Fatalf("RaiseFloor(%d) = %d, %v; want ErrTokenOverflow", bump, f, err)
		}
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("a refused RaiseFloor changed the state")
		}
	}
	// The last token of the sequence is granted; after it the scope is
	// exhausted: refused, never wrapped to a low token.
	if r := apply(t, s, 0, acquireCmd("b", 10*sec, 2, "")); r.Err != nil || r.Lease.Token != ^uint64(0) {
		t.Fatalf("last token: %+v", r)
	}
	apply(t, s, 0, releaseCmd(2))
	before = snapshotBytes(t, s)
	if r := apply(t, s, 0, acquireCmd("b", 10*sec, 3, "")); !errors.Is(r.Err, ErrInvalidArgument) {
		t.Fatalf("grant past 2^64-1: %+v", r)
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) {
		t.Fatal("a refused grant changed the state")
	}
}

func TestFloorRoundTripsASnapshot(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("a", 10*sec, 1, "req-a"))
	if _, err := s.RaiseFloor(1 << 32); err != nil {
		t.Fatal(err)
	}
	raw := snapshotBytes(t, s)
	r, err := Restore(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if r.Floor() != 1+1<<32 || !bytes.Equal(raw, snapshotBytes(t, r)) {
		t.Fatalf("restored floor %d; same bytes %v", r.Floor(), bytes.Equal(raw, snapshotBytes(t, r)))
	}
	if g := apply(t, r, 2*sec, acquireCmd("new", 10*sec, 2, "")); g.Lease.Token != 2+1<<32 {
		t.Fatalf("token after the round trip: %d", g.Lease.Token)
	}
	// The floor is part of the state's bytes, so of the state hash
	// replicas compare (cluster Status, jepsen replicas-converge).
	z := New()
	apply(t, z, 1*sec, acquireCmd("a", 10*sec, 1, "req-a"))
	if bytes.Equal(raw, snapshotBytes(t, z)) {
		t.Fatal("two states that differ only in their floor write the same snapshot")
	}
}

// oldSnapshot was written by leasefence at 065368c, before the token floor
// existed: shard 1 (a lease on a), b 2 (a lease on b), request id req-a.
const oldSnapshot = "010e08011080bcc1960b18022002280102350a10010000000000000000000000000000aa1201611a05736861726420012a03682d613080c8afa025388094ebdc034080dc9afd2802310a10030000000000000000000000000000aa1201621a016220022a03682d623080c8afa0253880bcc1960b408084f1b63003050a0162100203090a057368617264100104440a057265712d61108094ebdc031a350a10010000000000000000000000000000aa1201611a05736861726420012a03682d613080c8afa025388094ebdc034080dc9afd28ff00"

func TestSnapshotWithoutFloorRestoresWithFloorZero(t *testing.T) {
	raw, err := hex.DecodeString(oldSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if r.Floor() != 0 || r.ScopeCounter("shard") != 1 || r.ScopeCounter("b") != 2 || r.Len() != 2 {
		t.Fatalf("floor %d, counters %d %d, %d leases", r.Floor(), r.ScopeCounter("shard"), r.ScopeCounter("b"), r.Len())
	}
	// A state with floor 0 writes the old bytes: an upgrade changes no
	// replica's snapshot or state hash.
	if !bytes.Equal(raw, snapshotBytes(t, r)) {
		t.Fatal("a floor-0 state writes other bytes than the old format")
	}
	if g := apply(t, r, 4*sec, acquireCmd("c", 10*sec, 9, "")); g.Lease.Token != 1 {
		t.Fatalf("first token of a new scope with floor 0: %d", g.Lease.Token)
	}
}

func TestRestoreRefusesALeaseAboveItsCounterWhateverTheFloor(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("a", 10*sec, 1, ""))
	if _, err := s.RaiseFloor(100); err != nil {
		t.Fatal(err)
	}
	apply(t, s, 1*sec, acquireCmd("b", 10*sec, 2, "")) // token 102
	good := snapshotBytes(t, s)
	// Lower b's counter below its lease's token (102 → 101, same length).
	bad := bytes.Replace(good, []byte{recScope, 5, 0x0a, 0x01, 'b', 0x10, 102}, []byte{recScope, 5, 0x0a, 0x01, 'b', 0x10, 101}, 1)
	if bytes.Equal(bad, good) {
		t.Fatal("test bug: scope record of b not found")
	}
	if r, err := Restore(bytes.NewReader(bad)); !errors.Is(err, ErrCorruptSnapshot) || r != nil {
		t.Fatalf("a lease above its scope's counter restored: %v", err)
	}
}
