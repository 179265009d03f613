package fsm

import (
	"bytes"
	"testing"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// seedState returns a state with a few leases, scopes and request ids,
// restored once (a token floor above some of its counters).
func seedState(t testing.TB) *State {
	s := New()
	c := acquireCmd("a", 10*sec, 1, "req-a")
	c.GetAcquire().Scope = "shard"
	for i, e := range [][]byte{
		entry(t, 1*sec, c, acquireCmd("b", 5*sec, 2, "")),
		entry(t, 2*sec, renewCmd(1), releaseCmd(2), acquireCmd("b", 5*sec, 3, "req-b")),
	} {
		if _, err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := s.RaiseFloor(100); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

// FuzzApply feeds arbitrary entry bytes to a populated state: Apply never
// panics; a refused entry changes nothing; an applied one keeps the
// invariants (one lease per resource, tokens within their counters, a
// snapshot that restores to the same bytes).
func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{byte(EntryBatch)})
	f.Add([]byte{0x7f, 1, 2})
	f.Add(entry(f, 3*sec, acquireCmd("c", 10*sec, 4, "req-c")))
	f.Add(entry(f, 30*sec, tickCmd(), renewCmd(1), releaseCmd(3)))
	f.Add(entry(f, 0, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Resource: "a", TtlNs: -1}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := seedState(t)
		before := snapshotBytes(t, s)
		a, err := s.Apply(data)
		if err != nil {
			if a != nil {
				t.Fatal("error with a result")
			}
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("a refused entry changed the state")
			}
			return
		}
		for _, ev := range a.Events {
			if ev.Type == EventGranted && ev.Lease.Token <= s.floor {
				t.Fatalf("granted token %d, not above the floor %d", ev.Lease.Token, s.floor)
			}
		}
		leases, scopes := 0, 0
		for name, e := range s.names {
			if e.slot == nil && e.counter == 0 {
				t.Fatalf("empty name entry %q kept", name)
			}
			if e.counter != 0 {
				scopes++
			}
			if sl := e.slot; sl != nil {
				leases++
				l := sl.l
				if l.Resource != name || s.byID[l.ID] != sl || l.Token == 0 || l.Token > s.names[l.Scope].counter || s.expiry[sl.heapIdx].s != sl || s.expiry[sl.heapIdx].at > l.ExpiresAt {
					t.Fatalf("invariant broken for %q: %+v", name, *l)
				}
			}
		}
		if leases != s.leases || scopes != s.scopes || len(s.byID) != leases || len(s.expiry) != leases {
			t.Fatal("indexes disagree")
		}
		raw := snapshotBytes(t, s)
		r, err := Restore(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("state after apply does not restore: %v", err)
		}
		if !bytes.Equal(raw, snapshotBytes(t, r)) {
			t.Fatal("restore differs")
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: never a panic; either a
// clear error and no state, or a state that survives a snapshot round trip
// unchanged. (Accepted bytes need not be canonical: protobuf and uvarint
// allow several encodings of one value; fields this version does not know
// are refused.)
func FuzzRestore(f *testing.F) {
	f.Add([]byte{})
	f.Add(snapshotBytes(f, New()))
	f.Add(snapshotBytes(f, seedState(f)))
	good := snapshotBytes(f, seedState(f))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Restore(bytes.NewReader(data))
		if err != nil {
			if s != nil {
				t.Fatal("error with a state")
			}
			return
		}
		once := snapshotBytes(t, s)
		again, err := Restore(bytes.NewReader(once))
		if err != nil {
			t.Fatalf("a restored state's own snapshot does not restore: %v", err)
		}
		if !bytes.Equal(once, snapshotBytes(t, again)) {
			t.Fatal("state changed across a snapshot round trip")
		}
	})
}
