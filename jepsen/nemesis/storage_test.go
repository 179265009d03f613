package nemesis

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestCorruptCommandEntryChangesTheNewestNamedEntry: on a real raft.db,
// the newest command entry naming a workload resource has one byte of the
// name changed (every copy, same length); other entries are untouched.
func TestCorruptCommandEntryChangesTheNewestNamedEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	entries := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/1 lease-aaaa")},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....acquire jr/2 lease-bbbb")},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte("\x02....renew lease-aaaa")},
		{Index: 4, Term: 1, Type: raft.LogNoop},
	}
	if err := store.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	store.Close()
	index, err := CorruptCommandEntry(path, "jr/") // the workers' ResourcePrefix
	if err != nil || index != 2 {
		t.Fatalf("got %d, %v; want entry 2", index, err)
	}
	store, err = raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, want := range entries {
		var l raft.Log
		if err := store.GetLog(want.Index, &l); err != nil {
			t.Fatal(err)
		}
		changed := !bytes.Equal(l.Data, want.Data)
		if changed != (want.Index == 2) || len(l.Data) != len(want.Data) {
			t.Fatalf("entry %d: %q (changed %v)", want.Index, l.Data, changed)
		}
	}
	if data, _ := os.ReadFile(path); bytes.Contains(data, []byte("jr/2 lease-bbbb")) {
		t.Fatal("a copy of the entry kept its name")
	}
}
