package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

func servedEntry(t *testing.T, id string) []byte {
	t.Helper()
	raw, err := EncodeNodeServed(id)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The served nodes are recorded once each, sorted, survive a snapshot and
// change no lease.
func TestNodeServedIsRecordedOnceAndSurvivesASnapshot(t *testing.T) {
	s := New()
	for _, id := range []string{"n2", "n1", "n2", "n3"} {
		a, err := s.Apply(servedEntry(t, id))
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Results) != 0 || len(a.Events) != 0 {
			t.Fatalf("a served entry gave results %v, events %v", a.Results, a.Events)
		}
	}
	want := []string{"n1", "n2", "n3"}
	if got := s.Served(); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	if !s.HasServed("n2") || s.HasServed("n4") {
		t.Fatal("HasServed disagrees with Served")
	}
	if s.Len() != 0 || s.Now() != 0 {
		t.Fatalf("a served entry changed the lease state: %d leases, now %d", s.Len(), s.Now())
	}
	raw := snapshotBytes(t, s)
	r, err := Restore(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Served(); !slices.Equal(got, want) {
		t.Fatalf("restored served %v, want %v", got, want)
	}
	// Applied in another order, the same set writes the same bytes.
	o := New()
	for _, id := range []string{"n3", "n1", "n2"} {
		if _, err := o.Apply(servedEntry(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(snapshotBytes(t, o), raw) {
		t.Fatal("two states with the same served nodes write different snapshots")
	}
}

// A snapshot taken before a node is recorded keeps its own list.
func TestASnapshotKeepsItsServedNodes(t *testing.T) {
	s := New()
	if _, err := s.Apply(servedEntry(t, "n1")); err != nil {
		t.Fatal(err)
	}
	sn := s.Snapshot()
	if _, err := s.Apply(servedEntry(t, "n0")); err != nil {
		t.Fatal(err)
	}
	s.ClearServed()
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Served(); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("the snapshot's served %v, want [n1]", got)
	}
	if got := s.Served(); len(got) != 0 {
		t.Fatalf("ClearServed left %v", got)
	}
}

// A served entry whose bytes changed, or whose node id is not a name, is
// refused and changes nothing.
func TestABadNodeServedEntryIsRefused(t *testing.T) {
	body, err := proto.Marshal(&fsmpb.NodeServed{NodeId: ""})
	if err != nil {
		t.Fatal(err)
	}
	emptyID := append([]byte{byte(EntryNodeServed), 0, 0, 0, 0}, body...)
	binary.BigEndian.PutUint32(emptyID[1:], entryChecksum(EntryNodeServed, body))
	flipped := servedEntry(t, "n1")
	flipped[len(flipped)-1] ^= 1
	for name, tc := range map[string]struct {
		entry []byte
		want  error
	}{
		"flipped byte": {flipped, ErrChecksum},
		"empty id":     {emptyID, ErrCorruptEntry},
		"short":        {[]byte{byte(EntryNodeServed), 1}, ErrChecksum},
	} {
		s := New()
		if _, err := s.Apply(tc.entry); !errors.Is(err, tc.want) {
			t.Errorf("%s: Apply = %v, want %v", name, err, tc.want)
		}
		if len(s.Served()) != 0 {
			t.Errorf("%s: recorded %v", name, s.Served())
		}
	}
	if _, err := EncodeNodeServed(""); err == nil {
		t.Error("EncodeNodeServed accepted an empty id")
	}
}

// A snapshot whose served list is not sorted, or lists a node twice, is
// refused.
func TestASnapshotWithUnsortedServedNodesIsRefused(t *testing.T) {
	for _, ids := range [][]string{{"n2", "n1"}, {"n1", "n1"}, {""}} {
		var buf bytes.Buffer
		enc := &recordWriter{w: &buf}
		enc.write(recHeader, &fsmpb.SnapshotHeader{Version: snapshotVersion, ServedNodes: ids})
		enc.writeRaw(recEnd, nil)
		if enc.err != nil {
			t.Fatal(enc.err)
		}
		if _, err := Restore(&buf); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("served %q: Restore = %v, want ErrCorruptSnapshot", ids, err)
		}
	}
}

// Without its served nodes, a snapshot writes the bytes of the same lease
// state that recorded none: what a replica of the version before them
// writes (state hashes compare the lease state alone).
func TestWithoutServedWritesTheLeaseStateAlone(t *testing.T) {
	grant, err := EncodeBatch(&fsmpb.Batch{NowNs: sec, SkewMarginNs: testMargin, DedupKeepNs: testKeep, Commands: []*fsmpb.Command{
		{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Resource: "r", Holder: "w", TtlNs: 5 * sec, LeaseId: bytes.Repeat([]byte{7}, LeaseIDLen)}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	with, without := New(), New()
	for _, e := range [][]byte{servedEntry(t, "n1"), grant, servedEntry(t, "n2")} {
		if _, err := with.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := without.Apply(grant); err != nil {
		t.Fatal(err)
	}
	var a bytes.Buffer
	if _, err := with.Snapshot().WithoutServed().WriteTo(&a); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), snapshotBytes(t, without)) {
		t.Fatal("WithoutServed writes other bytes than the same leases with no served nodes")
	}
	if bytes.Equal(snapshotBytes(t, with), snapshotBytes(t, without)) {
		t.Fatal("the snapshot itself lost its served nodes")
	}
}
