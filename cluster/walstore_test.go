package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

// A data dir keeps the log store it was created with: started with the
// other one it is refused with a message that names both (never started
// with an empty log next to its term and vote), nothing is created for
// the other store, and it starts again with its own, its log intact.
func TestDataDirRefusesTheOtherLogStore(t *testing.T) {
	for _, tc := range []struct{ made, other string }{
		{LogStoreBoltDB, LogStoreWAL},
		{LogStoreWAL, LogStoreBoltDB},
	} {
		t.Run(tc.made, func(t *testing.T) {
			var buf lockedBuffer
			n, cfg := oneNode(t, &buf, func(c *Config) { c.LogStore = tc.made })
			acquireN(t, n, "kept", 3)
			applied := n.AppliedIndex()
			n.Close()
			walDir := filepath.Join(cfg.DataDir, walDirName)

			other := cfg
			other.LogStore = tc.other
			startRefused(t, other, `created with the "`+tc.made+`" log store`, "--log-store "+tc.made)
			if _, err := os.Stat(walDir); tc.made == LogStoreBoltDB && err == nil {
				t.Fatal("a refused start created wal/")
			}

			n, err := Start(cfg)
			if err != nil {
				t.Fatalf("restart with its own store: %v", err)
			}
			defer n.Close()
			eventually(t, 10*time.Second, "the log replays", func() bool { return n.AppliedIndex() >= applied })
		})
	}
}

// A data dir from before the option has no record of its store: a raft.db
// with a term and log is a boltdb one, and refused with wal.
func TestDataDirWithoutARecordIsBoltDB(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, func(c *Config) { c.LogStore = LogStoreBoltDB })
	acquireN(t, n, "old", 2)
	n.Close()
	db, err := bbolt.Open(filepath.Join(cfg.DataDir, "raft.db"), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("conf")).Delete(logStoreKey) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wal := cfg
	wal.LogStore = LogStoreWAL
	startRefused(t, wal, `created with the "boltdb" log store`)
	n, err = Start(cfg)
	if err != nil {
		t.Fatalf("restart with boltdb: %v", err)
	}
	n.Close()
}

// A wal data dir whose wal/ is gone has lost its log: refused like an
// emptied raft.db, and wal/ is not created again.
func TestWALDataDirWithoutItsLogIsRefused(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, func(c *Config) { c.LogStore = LogStoreWAL })
	acquireN(t, n, "gone", 2)
	n.Close()
	walDir := filepath.Join(cfg.DataDir, walDirName)
	if err := os.RemoveAll(walDir); err != nil {
		t.Fatal(err)
	}
	startRefused(t, cfg, "lost its log", "--join")
	if _, err := os.Stat(walDir); err == nil {
		t.Fatal("a refused start created wal/ again")
	}
}

// raft must know raft-wal cannot hold a gap (it empties a monotonic store
// when it installs a snapshot instead of leaving older entries around):
// the checking wrapper and the log cache above it must say what the store
// says.
func TestCheckedLogStoreIsMonotonicLikeTheStoreItWraps(t *testing.T) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			logs := openTestStores(t, kind)
			checked, err := newCheckedLogStore(logs, "log", "n1", hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			cache, err := raft.NewLogCache(16, checked)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := cache.IsMonotonic(), kind == LogStoreWAL; got != want {
				t.Fatalf("IsMonotonic = %v through the wrapper, want %v", got, want)
			}
		})
	}
}

// logPathOf is where cfg's node keeps its log (raft.db or wal/): the
// store named, or with none named the data dir's own.
func logPathOf(cfg Config) string {
	kind := cfg.withDefaults().LogStore
	if kind == "" {
		kind = LogStoreBoltDB
		if _, err := os.Stat(filepath.Join(cfg.DataDir, walDirName)); err == nil {
			kind = LogStoreWAL
		}
	}
	return logStorePath(cfg.DataDir, kind)
}

// replaceInLog replaces old by new (same length) wherever the log at path
// holds it: raft.db, or every segment file of a wal directory. It returns
// how many it replaced and fails the test when there is none.
func replaceInLog(t *testing.T, path string, old, new []byte) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() {
		return replaceInFile(t, path, old, new)
	}
	segs, err := filepath.Glob(filepath.Join(path, "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment files in %s: %v", path, err)
	}
	n := 0
	for _, seg := range segs {
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if c := bytes.Count(data, old); c > 0 {
			n += replaceInFile(t, seg, old, new)
		}
	}
	if n == 0 {
		t.Fatalf("%q not found in %s", old, path)
	}
	return n
}

// dump-log reads a wal data dir (from a copy of wal/: raft-wal has no
// read-only open) and finds the commands the same operations leave in a
// boltdb one, each with its result; the data dir is left byte for byte as
// it was, even with a stray segment file that raftwal.Open on the original
// would delete (a crash between a compaction's metadata commit and its
// file deletion), and the copy is removed.
func TestDumpLogOfAWALDataDirReadsWhatBoltDBDoes(t *testing.T) {
	commands := map[string][]string{}
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		var buf lockedBuffer
		n, cfg := oneNode(t, &buf, func(c *Config) { c.LogStore = kind })
		ls, ctx := n.LeaseServer(), ctxT(t)
		acquire := func(res, rid string) *api.AcquireResponse {
			r, _ := ls.Acquire(ctx, &api.AcquireRequest{Resource: res, RequestId: rid, Ttl: durationpb.New(5 * time.Minute)})
			return r
		}
		a := acquire("w/0", "r-1")
		acquire("w/1", "r-2")
		acquire("w/0", "r-3") // refused: held
		if _, err := ls.Renew(ctx, &api.RenewRequest{LeaseId: a.Lease.Id}); err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Release(ctx, &api.ReleaseRequest{LeaseId: a.Lease.Id}); err != nil {
			t.Fatal(err)
		}
		acquire("w/0", "r-4")
		n.Close()

		if kind == LogStoreWAL {
			segs, err := filepath.Glob(filepath.Join(cfg.DataDir, walDirName, "*.wal"))
			if err != nil || len(segs) == 0 {
				t.Fatalf("no segment files: %v", err)
			}
			stray := filepath.Join(cfg.DataDir, walDirName, fmt.Sprintf("%020d-%016x.wal", 1, 999))
			if err := os.WriteFile(stray, []byte("left by a crash"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		before := dataDirHashes(t, cfg.DataDir)
		var out bytes.Buffer
		if err := DumpLog(cfg.DataDir, &out); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if after := dataDirHashes(t, cfg.DataDir); !maps.Equal(before, after) {
			t.Fatalf("%s: dump-log changed the data dir: %v", kind, changedFiles(before, after))
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Fatalf("%s: dump-log left %v in TMPDIR", kind, left)
		}
		// Every command but the leader's ticks (how many depends on
		// timing), without what differs between two runs (index, term,
		// times, lease ids, the wait a refusal names).
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			var r LogRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			if r.Kind == LogCommand && r.Type != "tick" {
				commands[kind] = append(commands[kind], fmt.Sprintf("%s %q %s token %d %s error %t", r.Type, r.RequestID, r.Resource, r.Token, r.Result, r.Error != ""))
			}
		}
		if len(commands[kind]) != 6 {
			t.Fatalf("%s: %d commands dumped, want 6: %q", kind, len(commands[kind]), commands[kind])
		}
	}
	if !slices.Equal(commands[LogStoreBoltDB], commands[LogStoreWAL]) {
		t.Fatalf("dumps differ:\nboltdb %q\nwal    %q", commands[LogStoreBoltDB], commands[LogStoreWAL])
	}
	t.Logf("both: %q", commands[LogStoreWAL])
}

// raft clears a deposed leader's uncommitted suffix (DeleteRange on the
// tail) and appends the new leader's entries; after a restart every entry
// must read back. raft-wal v0.4.0 sealed the segment without its index
// there, and the node could never read its log again ("sealed segment has
// no index block"; found by TestRandomSigkillsUnderLoadLoseNoAcknowledgedGrant
// with LEASEFENCE_LOG_STORE=wal).
func TestWALLogReadsBackAfterATailTruncationAndRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() (raft.LogStore, func()) {
		stable, logs, closeLog, _, err := openStores(dir, LogStoreWAL, dataDirLockWait, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		return logs, func() { closeLog.Close(); stable.Close() }
	}
	logs, closeAll := open()
	store := func(from, to, term uint64) {
		var batch []*raft.Log
		for i := from; i <= to; i++ {
			batch = append(batch, &raft.Log{Index: i, Term: term, Type: raft.LogNoop})
		}
		if err := logs.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
	}
	store(1, 10, 1)
	if err := logs.DeleteRange(9, 10); err != nil { // the suffix a new leader overrides
		t.Fatal(err)
	}
	store(9, 12, 2)
	closeAll()

	logs, closeAll = open()
	defer closeAll()
	if _, err := newCheckedLogStore(logs, dir, "n1", hclog.NewNullLogger()); err != nil {
		t.Fatalf("log after a tail truncation and a restart: %v", err)
	}
	var l raft.Log
	if err := logs.GetLog(12, &l); err != nil || l.Term != 2 {
		t.Fatalf("entry 12: %v, term %d", err, l.Term)
	}
}

// TestCompactedEntriesAreGoneFromEitherLogStore: after a compaction
// (DeleteRange from the head, as raft does after a snapshot) no entry
// below the new first index is served, with either store. raft-wal kept
// serving them while they sat in its open segment, so a follower held
// down caught up from the leader's log instead of installing its snapshot,
// and the snapshot nemesis could not exercise that path with wal.
func TestCompactedEntriesAreGoneFromEitherLogStore(t *testing.T) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			logs := openTestStores(t, kind)
			var batch []*raft.Log
			for i := uint64(1); i <= 100; i++ {
				batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogNoop})
			}
			if err := logs.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			if err := logs.DeleteRange(1, 60); err != nil {
				t.Fatal(err)
			}
			if first, err := logs.FirstIndex(); err != nil || first != 61 {
				t.Fatalf("first index %d (%v), want 61", first, err)
			}
			var l raft.Log
			for _, i := range []uint64{1, 30, 60} {
				if err := logs.GetLog(i, &l); err != raft.ErrLogNotFound {
					t.Fatalf("compacted entry %d: %v (index %d), want raft.ErrLogNotFound", i, err, l.Index)
				}
			}
			for _, i := range []uint64{61, 100} {
				if err := logs.GetLog(i, &l); err != nil || l.Index != i {
					t.Fatalf("entry %d: %v (index %d)", i, err, l.Index)
				}
			}
		})
	}
}

// openTestStores opens a new data dir's stores with the log store kind,
// closed when the test ends, and returns the log store.
func openTestStores(t *testing.T, kind string) raft.LogStore {
	t.Helper()
	stable, logs, closeLog, _, err := openStores(t.TempDir(), kind, dataDirLockWait, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if closeLog != nil {
			closeLog.Close()
		}
		stable.Close()
	})
	return logs
}
