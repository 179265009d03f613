package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// TestEntryWithFlippedByteIsRefusedBeforeApply reproduces issue 14 §1 at
// the FSM: a log entry whose resource name was altered on disk
// (db/39 -> dX/39, same length, still a valid protobuf) must be refused,
// not applied as a grant of another resource.
func TestEntryWithFlippedByteIsRefusedBeforeApply(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("db/38", 10*sec, 1, ""))
	before := snapshotBytes(t, s)
	good := entry(t, 1*sec, acquireCmd("db/39", 10*sec, 2, "req-39"))
	i := bytes.Index(good, []byte("db/39"))
	if i < 0 {
		t.Fatal("resource name not found in the entry")
	}
	bad := bytes.Clone(good)
	bad[i+1] = 'X'
	if _, err := DecodeEntry(bad[:]); err == nil {
		// The body alone still decodes: only a checksum can tell.
		t.Log("body still decodes")
	}
	a, err := s.Apply(bad)
	if !errors.Is(err, ErrChecksum) || !errors.Is(err, ErrCorruptEntry) || a != nil {
		t.Fatalf("flipped byte: want ErrChecksum, got %v (%v)", err, a)
	}
	if err := VerifyEntry(bad); !errors.Is(err, ErrChecksum) {
		t.Fatalf("VerifyEntry: want ErrChecksum, got %v", err)
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) {
		t.Fatal("a refused entry changed the state")
	}
	if err := VerifyEntry(good); err != nil {
		t.Fatalf("VerifyEntry(good): %v", err)
	}
	if _, err := s.Apply(good); err != nil {
		t.Fatalf("the intact entry: %v", err)
	}
}

// TestEveryByteOfAnEntryIsCovered flips each byte of an entry in turn:
// every variant is refused and leaves the state as it was.
func TestEveryByteOfAnEntryIsCovered(t *testing.T) {
	good := entry(t, 1*sec, acquireCmd("db/39", 10*sec, 2, "req-39"), renewCmd(1), tickCmd())
	// Every bit of every byte: the type byte's high bit (0x02 → 0x82, an
	// "ignorable" type) was the one flip that passed, and the grant was
	// skipped without a word.
	for i := range good {
		for bit := range 8 {
			bad := bytes.Clone(good)
			bad[i] ^= 1 << bit
			s := New()
			if a, err := s.Apply(bad); err == nil {
				t.Fatalf("byte %d bit %d flipped: applied %+v", i, bit, a)
			}
			if s.Len() != 0 {
				t.Fatalf("byte %d bit %d flipped: state changed", i, bit)
			}
			// The log store's own check (VerifyEntry) must refuse every
			// flip that leaves a type it checks (an unknown type it
			// leaves to Apply, which refuses it above).
			if typ := EntryType(bad[0]); typ == EntryBatchChecked || typ&EntryIgnorable != 0 {
				if err := VerifyEntry(bad); !errors.Is(err, ErrChecksum) {
					t.Fatalf("byte %d bit %d flipped: VerifyEntry says %v", i, bit, err)
				}
			}
		}
	}
}

// An ignorable entry carries a checksum too: one whose bytes match is
// skipped, one whose bytes do not is refused (a flipped bit must not turn
// a known entry, or garbage, into one this node skips).
func TestIgnorableEntriesAreChecksummed(t *testing.T) {
	const typ = EntryIgnorable | 0x05
	body := []byte{1, 2, 3}
	ok := make([]byte, 1+checksumLen+len(body))
	ok[0] = byte(typ)
	binary.BigEndian.PutUint32(ok[1:], entryChecksum(typ, body))
	copy(ok[1+checksumLen:], body)
	if err := VerifyEntry(ok); err != nil {
		t.Fatalf("VerifyEntry of a sound ignorable entry: %v", err)
	}
	if a, err := New().Apply(ok); err != nil || len(a.Results) != 0 {
		t.Fatalf("a sound ignorable entry: %v %v, want skipped", a, err)
	}
	for _, bad := range [][]byte{
		{byte(typ)},
		{byte(typ), 1, 2},
		append([]byte{byte(typ), 0, 0, 0, 0}, body...),
	} {
		if err := VerifyEntry(bad); !errors.Is(err, ErrChecksum) {
			t.Errorf("VerifyEntry(% x): %v, want ErrChecksum", bad, err)
		}
		if _, err := New().Apply(bad); !errors.Is(err, ErrChecksum) {
			t.Errorf("Apply(% x): %v, want ErrChecksum", bad, err)
		}
	}
}

// TestUnchecksummedBatchStillApplies: entries of type EntryBatch (1),
// written before checksums, are still applied, so existing logs replay.
func TestUnchecksummedBatchStillApplies(t *testing.T) {
	body, err := encodeBody(&fsmpb.Batch{NowNs: sec, SkewMarginNs: testMargin, DedupKeepNs: testKeep,
		Commands: []*fsmpb.Command{acquireCmd("old/1", 10*sec, 1, "")}})
	if err != nil {
		t.Fatal(err)
	}
	old := append([]byte{byte(EntryBatch)}, body...)
	if err := VerifyEntry(old); err != nil {
		t.Fatalf("VerifyEntry(type 1): %v", err)
	}
	s := New()
	a, err := s.Apply(old)
	if err != nil || a.Results[0].Err != nil || a.Results[0].Lease.Token != 1 {
		t.Fatalf("type 1 entry: %v %+v", err, a)
	}
}

// No type byte makes VerifyEntry or Apply panic: the checksum of type
// 0xff once sliced typeBytes[255:0] (t+1 wrapped around in a byte), which
// FuzzApply found in CI.
func TestEveryTypeByteIsRefusedOrAppliedWithoutPanic(t *testing.T) {
	for typ := range 256 {
		for _, body := range [][]byte{nil, {0}, []byte("0000"), []byte("00000000")} {
			data := append([]byte{byte(typ)}, body...)
			_ = VerifyEntry(data)
			_, _ = New().Apply(data)
		}
	}
}
