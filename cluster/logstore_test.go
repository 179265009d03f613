package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// TestLogStoreOpensFilesOfEitherFreelistMode: data dirs written before the
// freelist stopped being synced open, and a file written since opens with
// a synced freelist (a downgrade), with every log entry intact.
func TestLogStoreOpensFilesOfEitherFreelistMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	next := uint64(1)
	for round, unsynced := range []bool{false, true, false, true} {
		store, err := openLogStore(path, unsynced)
		if err != nil {
			t.Fatalf("round %d (unsynced %v): open: %v", round, unsynced, err)
		}
		first, _ := store.FirstIndex()
		for i := first; first > 0 && i < next; i++ {
			var l raft.Log
			if err := store.GetLog(i, &l); err != nil || l.Index != i || len(l.Data) != 4096 {
				t.Fatalf("round %d: entry %d: %v %+v", round, i, err, l.Index)
			}
		}
		var logs []*raft.Log
		for j := 0; j < 500; j++ {
			logs = append(logs, &raft.Log{Index: next, Term: 1, Data: make([]byte, 4096)})
			next++
		}
		if err := store.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		// Compact as raft does, leaving free pages behind.
		if err := store.DeleteRange(max(first, 1), next-100); err != nil {
			t.Fatal(err)
		}
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckedLogStoreReportsCorruptEntriesReadLater: an entry whose bytes
// change on disk after the node started (real bolt file) is reported and
// stops the node when raft reads it, and is returned as read so the FSM's
// own checksum check refuses it (raft panics on a read error in its apply
// path); a follower refuses to store an entry that fails its checksum.
func TestCheckedLogStoreReportsCorruptEntriesReadLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	store, err := openLogStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	good, err := fsm.EncodeBatch(&fsmpb.Batch{NowNs: 1, Commands: []*fsmpb.Command{{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Resource: "db/39", LeaseId: make([]byte, 16)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: good}}); err != nil {
		t.Fatal(err)
	}
	s, err := newCheckedLogStore(store, path, "n1", testLogger(t, "store"))
	if err != nil {
		t.Fatalf("intact store: %v", err)
	}
	reported := make(chan error, 1)
	s.onCorrupt.set(func(err error) { reported <- err })

	bad := bytes.Clone(good)
	bad[bytes.Index(bad, []byte("db/39"))+1] = 'X'
	if err := s.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: bad}}); !errors.Is(err, fsm.ErrChecksum) {
		t.Fatalf("storing a corrupt entry: %v", err)
	}
	if last, _ := s.LastIndex(); last != 1 {
		t.Fatalf("last index %d after a refused store", last)
	}
	// Corrupt entry 1 on disk behind the open store (bolt maps the file
	// shared, so the change is seen by the next read).
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte("db/39"))
		if i < 0 {
			break
		}
		if _, err := f.WriteAt([]byte("X"), int64(off+i+1)); err != nil {
			t.Fatal(err)
		}
		off += i + 5
	}
	f.Close()
	var l raft.Log
	if err := s.GetLog(1, &l); err != nil {
		t.Fatalf("GetLog must not fail (raft would panic): %v", err)
	}
	if _, err := fsm.New().Apply(l.Data); !errors.Is(err, fsm.ErrChecksum) {
		t.Fatalf("the FSM must refuse what was read: %v", err)
	}
	select {
	case err := <-reported:
		var ce *CorruptLogError
		if !errors.As(err, &ce) || ce.Index != 1 || ce.Path != path || !strings.Contains(err.Error(), "members remove n1") {
			t.Fatalf("reported %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("corruption not reported")
	}
	store.Close()
	// And at the next start the scan refuses the file.
	store, err = openLogStore(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := newCheckedLogStore(store, path, "n1", testLogger(t, "store")); !errors.Is(err, ErrCorruptStore) {
		t.Fatalf("scan at open: %v", err)
	}
}

// A hole in the log (found after a kill -9 in the fault suite: "corrupt log
// entry 3630 ... log not found") is not corruption: the node starts.
func TestCheckedLogStoreAcceptsAHoleButNotAChangedEntry(t *testing.T) {
	store := raft.NewInmemStore()
	for _, i := range []uint64{1, 2, 4} {
		if err := store.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogNoop}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newCheckedLogStore(store, "raft.db", "n1", hclog.NewNullLogger()); err != nil {
		t.Fatalf("a log with a hole at 3 was refused: %v", err)
	}
	if err := store.StoreLog(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte{2, 0, 0, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := newCheckedLogStore(store, "raft.db", "n1", hclog.NewNullLogger()); err == nil {
		t.Fatal("an entry failing its checksum was accepted")
	}
}
