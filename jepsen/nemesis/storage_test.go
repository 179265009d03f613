package nemesis

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
)

// testLog is a log store of a data dir as leased lays it out.
type testLog interface {
	raft.LogStore
	Close() error
}

// openTestLog opens the log of dataDir in store: raft.db, or raft-wal in
// dataDir/wal.
func openTestLog(t *testing.T, dataDir, store string) testLog {
	t.Helper()
	if store == "wal" {
		if err := os.MkdirAll(filepath.Join(dataDir, "wal"), 0o750); err != nil {
			t.Fatal(err)
		}
		w, err := raftwal.Open(filepath.Join(dataDir, "wal"))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dataDir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeTestLog writes batches to the log of dataDir in store, one
// StoreLogs each (one batch per call, as raft writes a follower's
// appends), and closes it.
func writeTestLog(t *testing.T, dataDir, store string, batches ...[]*raft.Log) {
	t.Helper()
	log := openTestLog(t, dataDir, store)
	defer log.Close()
	for _, b := range batches {
		if err := log.StoreLogs(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCorruptCommandEntryChangesTheNewestNamedEntry: on a real raft.db
// and a real raft-wal log, the newest command entry naming a workload
// resource has one byte of the name changed (every copy, same length) in
// the file the call names; other entries are untouched, and the store
// still returns the changed entry (for raft-wal: its framing still reads).
func TestCorruptCommandEntryChangesTheNewestNamedEntry(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			entries := []*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/1 lease-aaaa")},
				{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/2 lease-bbbb")},
				{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....renew lease-aaaa")},
				{Index: 4, Term: 1, Type: raft.LogNoop},
			}
			var batches [][]*raft.Log
			for _, e := range entries {
				batches = append(batches, []*raft.Log{e})
			}
			writeTestLog(t, dir, store, batches...)
			index, path, err := CorruptCommandEntry(dir, "jr/", ChangeName) // the workers' ResourcePrefix
			if err != nil || index != 2 {
				t.Fatalf("got %d, %v; want entry 2", index, err)
			}
			wantFile := "raft.db"
			if store == "wal" {
				wantFile = ".wal"
			}
			if !strings.HasSuffix(path, wantFile) {
				t.Fatalf("changed %s, want the %s file", path, wantFile)
			}
			log := openTestLog(t, dir, store)
			defer log.Close()
			for _, want := range entries {
				var l raft.Log
				if err := log.GetLog(want.Index, &l); err != nil {
					t.Fatalf("entry %d: %v", want.Index, err)
				}
				changed := !bytes.Equal(l.Data, want.Data)
				if changed != (want.Index == 2) || len(l.Data) != len(want.Data) {
					t.Fatalf("entry %d: %q (changed %v)", want.Index, l.Data, changed)
				}
			}
			if data, _ := os.ReadFile(path); bytes.Contains(data, []byte("jr/2 lease-bbbb")) {
				t.Fatal("a copy of the entry kept its name")
			}
		})
	}
}

// TestCorruptCommandEntryCanFlipTheTypeByte: with ChangeType the newest
// named entry keeps its body and gets the type byte's high bit flipped
// (0x02 → 0x82), in every copy, on either store.
func TestCorruptCommandEntryCanFlipTheTypeByte(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			want := []byte("\x02....acquire jr/2 lease-bbbb")
			writeTestLog(t, dir, store,
				[]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/1 lease-aaaa")}},
				[]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: want}},
				[]*raft.Log{{Index: 3, Term: 1, Type: raft.LogNoop}})
			index, path, err := CorruptCommandEntry(dir, "jr/", ChangeType)
			if err != nil || index != 2 {
				t.Fatalf("got %d, %v; want entry 2", index, err)
			}
			log := openTestLog(t, dir, store)
			defer log.Close()
			var l raft.Log
			if err := log.GetLog(2, &l); err != nil || l.Data[0] != 0x82 || !bytes.Equal(l.Data[1:], want[1:]) {
				t.Fatalf("entry 2 reads %q, %v; want type 0x82 and the same body", l.Data, err)
			}
			if data, _ := os.ReadFile(path); bytes.Contains(data, want) {
				t.Fatal("a copy of the entry kept its type byte")
			}
		})
	}
}

// TestCorruptCommandEntrySkipsRaftWALsCheckedBatch: when the newest named
// entries are in the last batch of raft-wal's open segment, whose CRC
// raft-wal checks at open, the entry changed is the newest one before
// that batch, and raft-wal reads it back changed and keeps every entry:
// only the node's own entry check can catch it (a change in the last
// batch would be dropped as a torn write, and a node that skipped its
// entry checks would refuse anyway).
func TestCorruptCommandEntrySkipsRaftWALsCheckedBatch(t *testing.T) {
	dir := t.TempDir()
	batches := [][]*raft.Log{
		{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/1 lease-aaaa")}},
		{{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/2 lease-bbbb")}},
		{
			{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/3 lease-cccc")},
			{Index: 4, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/4 lease-dddd")},
			{Index: 5, Term: 1, Type: raft.LogNoop},
		},
	}
	writeTestLog(t, dir, "wal", batches...)
	index, _, err := CorruptCommandEntry(dir, "jr/", ChangeName)
	if err != nil || index != 2 {
		t.Fatalf("got %d, %v; want entry 2, the newest outside the last batch", index, err)
	}
	log := openTestLog(t, dir, "wal")
	defer log.Close()
	if last, _ := log.LastIndex(); last != 5 {
		t.Fatalf("last index %d after the change, want 5 (nothing dropped)", last)
	}
	var l raft.Log
	if err := log.GetLog(2, &l); err != nil || bytes.Equal(l.Data, batches[1][0].Data) {
		t.Fatalf("entry 2 reads %q, %v; want it changed", l.Data, err)
	}
}

// TestCorruptCommandEntryChangesRaftWALsLastBatchWhenNothingElse: when
// the only named entry is in raft-wal's last batch it is changed anyway,
// though raft-wal will read it as a torn write and drop it: the node must
// refuse a log that lost a synced batch as well (cluster/walstore.go;
// TestStorageNemesisChangeIsRefused with a real leased).
func TestCorruptCommandEntryChangesRaftWALsLastBatchWhenNothingElse(t *testing.T) {
	dir := t.TempDir()
	writeTestLog(t, dir, "wal",
		[]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....renew lease-aaaa")}},
		[]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/2 lease-bbbb")}})
	index, _, err := CorruptCommandEntry(dir, "jr/", ChangeName)
	if err != nil || index != 2 {
		t.Fatalf("got %d, %v; want entry 2, the only named one", index, err)
	}
	log := openTestLog(t, dir, "wal")
	defer log.Close()
	if last, _ := log.LastIndex(); last != 1 {
		t.Fatalf("last index %d after the change, want 1 (raft-wal drops the batch)", last)
	}
}

// TestCorruptCommandEntryNeedsANamedEntry: a log without an entry naming
// the prefix is an error, for either store, and nothing is changed.
func TestCorruptCommandEntryNeedsANamedEntry(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			writeTestLog(t, dir, store, []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....renew lease-aaaa")}})
			if index, path, err := CorruptCommandEntry(dir, "jr/", ChangeName); err == nil {
				t.Fatalf("changed entry %d in %s", index, path)
			}
		})
	}
}
