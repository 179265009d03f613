package cluster

import (
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// openLogStore opens the raft log and stable store, a bbolt file.
//
// With unsyncedFreelist (what nodes use), bbolt does not write its list of
// free pages on every commit. raft deletes the log's head after every
// snapshot, so the file soon holds thousands of free pages, and a synced
// freelist is rewritten in full by every commit: at a million live leases
// that was most of the leader's commit time (BenchmarkLogStoreCommit).
// The price is paid once, at open: bbolt rebuilds the list by walking the
// file's pages (the file holds only the trailing logs, tens of MB).
func openLogStore(path string, unsyncedFreelist bool) (*raftboltdb.BoltStore, error) {
	opts := &bbolt.Options{Timeout: 5 * time.Second}
	if unsyncedFreelist {
		opts.NoFreelistSync = true
		opts.FreelistType = bbolt.FreelistMapType
	}
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
}
