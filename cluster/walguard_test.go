package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// walLog opens dir's stores with the wal log store, failing the test on
// error. closeAll closes both as a node's stop does; crash closes them
// without the last record a stop makes, as a kill between two records.
func walLog(t *testing.T, dir string) (logs raft.LogStore, closeAll, crash func()) {
	t.Helper()
	stable, logs, closeLog, _, err := openStores(dir, LogStoreWAL, dataDirLockWait, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	d := logs.(*durableWAL)
	return logs, func() { closeLog.Close(); stable.Close() }, func() {
		close(d.stop)
		<-d.done
		d.WAL.Close()
		stable.Close()
	}
}

// storeBatch appends entries from..to, each holding "entry-<index>;", as
// one batch (one raft-wal commit).
func storeBatch(t *testing.T, logs raft.LogStore, from, to uint64) {
	t.Helper()
	var batch []*raft.Log
	for i := from; i <= to; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry-%d;", i))})
	}
	if err := logs.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
}

// raft-wal reads a last batch whose checksum fails as a torn write and
// drops it silently. A byte flipped on disk in a batch that was synced
// (and acknowledged) must not make the node start without those entries:
// it is refused as a corrupt log, naming the first entry lost.
func TestWALThatLostItsLastSyncedBatchIsRefused(t *testing.T) {
	dir := t.TempDir()
	logs, closeAll, _ := walLog(t, dir)
	storeBatch(t, logs, 1, 5)
	storeBatch(t, logs, 6, 10)
	closeAll()

	segs, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment files: %v", err)
	}
	changed := 0
	for _, seg := range segs {
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if c := bytes.Count(data, []byte("entry-10;")); c > 0 {
			changed += c
			if err := os.WriteFile(seg, bytes.ReplaceAll(data, []byte("entry-10;"), []byte("entry-1X;")), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if changed == 0 {
		t.Fatal("entry 10 not found in the segment files")
	}

	stable, _, closeLog, _, err := openStores(dir, LogStoreWAL, dataDirLockWait, hclog.NewNullLogger())
	if err == nil {
		closeLog.Close()
		stable.Close()
		t.Fatal("a wal that lost its last synced batch opened")
	}
	var ce *CorruptLogError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorruptStore) || ce.Index != 6 {
		t.Fatalf("want a *CorruptLogError at entry 6, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "ends at entry 5") || !strings.Contains(msg, "entry 10") {
		t.Fatalf("message %q does not say where the log ends and what it held", msg)
	}
}

// Deletions that reach the end of the log (a deposed leader's suffix
// replaced; the whole log after a snapshot is installed) lower the
// record first: the shorter log opens again.
func TestWALTailDeletionsAreNotTakenForDamage(t *testing.T) {
	dir := t.TempDir()
	logs, closeAll, _ := walLog(t, dir)
	storeBatch(t, logs, 1, 10)
	closeAll() // records 10
	logs, _, crash := walLog(t, dir)
	if err := logs.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	crash() // before the next record
	logs, _, crash = walLog(t, dir)
	if last, _ := logs.LastIndex(); last != 7 {
		t.Fatalf("last index %d, want 7", last)
	}
	if err := logs.DeleteRange(1, 7); err != nil { // the whole log
		t.Fatal(err)
	}
	crash()
	logs, closeAll, _ = walLog(t, dir)
	defer closeAll()
	if last, _ := logs.LastIndex(); last != 0 {
		t.Fatalf("last index %d, want an empty log", last)
	}
}

// A record older than the log's head (the head compacted past it before
// the next record) must still be lowered when the whole log goes, as it
// does when raft installs a snapshot: the empty log opens again.
func TestWALWholeLogDeletionLowersARecordOlderThanItsHead(t *testing.T) {
	dir := t.TempDir()
	logs, closeAll, _ := walLog(t, dir)
	storeBatch(t, logs, 1, 10)
	closeAll() // records 10
	logs, _, crash := walLog(t, dir)
	storeBatch(t, logs, 11, 20) // not recorded yet
	// Compaction: the head moves past the record.
	if err := logs.DeleteRange(1, 15); err != nil {
		t.Fatal(err)
	}
	if err := logs.DeleteRange(16, 20); err != nil { // the whole log, as after a snapshot install
		t.Fatal(err)
	}
	crash()
	logs, closeAll, _ = walLog(t, dir)
	defer closeAll()
	if last, _ := logs.LastIndex(); last != 0 {
		t.Fatalf("last index %d, want an empty log", last)
	}
}
