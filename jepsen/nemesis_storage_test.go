package jepsen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
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
	index, err := nm.CorruptCommandEntry(path, ResourcePrefix)
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

// TestCheckStorageRefusedCatchesANodeThatServedOn: the checker fails a
// run in which a node came up on a changed raft.db and applied past the
// entry, and passes refusals and self-fencing.
func TestCheckStorageRefusedCatchesANodeThatServedOn(t *testing.T) {
	heal := func(o history.StorageOutcome) history.Fault {
		return history.Fault{Phase: "heal", Kind: history.NemStorage, Target: "n2", TimeNs: int64(time.Second), Storage: &o}
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 12, Fenced: true}),
		heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", SetAside: true})}); r.Verdict != checker.Valid || r.Checked != 3 {
		t.Fatalf("refused and fenced: %v", r)
	}
	r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 14, Served: true})})
	if r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyServedFromCorruptStore {
		t.Fatalf("served on: %v", r)
	}
	r = checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", Served: true})})
	if r.Verdict != checker.Invalid || !strings.Contains(r.Witness, "snapshot") {
		t.Fatalf("restored a changed snapshot: %v", r)
	}
	if r := checker.CheckStorageRefused(nil); r.Verdict != history.Unknown {
		t.Fatalf("no fault: %v", r)
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 3})}); r.Verdict != history.Unknown {
		t.Fatalf("undecided: %v", r)
	}
}
