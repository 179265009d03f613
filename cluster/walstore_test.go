package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
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
			stable, logs, closeLog, err := openStores(t.TempDir(), kind, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer stable.Close()
			if closeLog != nil {
				defer closeLog.Close()
			}
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
