package cluster

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
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
