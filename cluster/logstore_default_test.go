package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An empty Config.LogStore (leased's default) gives a new data dir the
// wal store, and lets every existing data dir go on with its own: one made
// with boltdb, recorded or from before the record, starts with its log
// intact and no wal/ beside it.
func TestEmptyLogStoreIsWALForNewDataDirsAndTheirOwnForOthers(t *testing.T) {
	if defaultLogStore != "" {
		t.Skipf("LEASEFENCE_LOG_STORE=%s pins every node's store", defaultLogStore)
	}
	t.Run("new", func(t *testing.T) {
		var buf lockedBuffer
		n, cfg := oneNode(t, &buf, nil)
		acquireN(t, n, "new", 2)
		if got := n.cfg.LogStore; got != LogStoreWAL {
			t.Fatalf("a new data dir's store: %q, want %q", got, LogStoreWAL)
		}
		n.Close()
		if _, err := os.Stat(filepath.Join(cfg.DataDir, walDirName)); err != nil {
			t.Fatalf("no wal/ in a new data dir: %v", err)
		}
		// Named explicitly, the other store is refused as before.
		bolt := cfg
		bolt.LogStore = LogStoreBoltDB
		startRefused(t, bolt, `created with the "wal" log store`)
	})
	t.Run("boltdb", func(t *testing.T) {
		var buf lockedBuffer
		n, cfg := oneNode(t, &buf, func(c *Config) { c.LogStore = LogStoreBoltDB })
		acquireN(t, n, "old", 3)
		applied := n.AppliedIndex()
		n.Close()
		auto := cfg
		auto.LogStore = ""
		n, err := Start(auto)
		if err != nil {
			t.Fatalf("a boltdb data dir with the default store: %v", err)
		}
		defer n.Close()
		eventually(t, 10*time.Second, "the log replays", func() bool { return n.AppliedIndex() >= applied })
		if got := n.cfg.LogStore; got != LogStoreBoltDB {
			t.Fatalf("store: %q, want %q", got, LogStoreBoltDB)
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, walDirName)); err == nil {
			t.Fatal("the default store created wal/ beside a boltdb log")
		}
	})
}
