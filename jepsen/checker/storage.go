package checker

import (
	"fmt"

	"github.com/leasefence/leasefence/jepsen/history"
)

// The storage nemesis's checker (nemesis/storage.go).

// NameStorage is CheckStorageRefused's name.
const NameStorage = "corrupt-storage-refused"

// AnomalyServedFromCorruptStore: a node came up on a log (raft.db or wal)
// with a changed entry and applied past it without refusing.
const AnomalyServedFromCorruptStore = "served-from-corrupt-store"

// CheckStorageRefused is the storage nemesis's checker: after each change
// to a stopped node's log (raft.db or wal) or newest snapshot, the node
// must refuse (exit naming the
// corrupt store) or fence itself; a node that came up and applied past
// the changed entry as if nothing happened is invalid. The cluster as a
// whole is held to its other properties by the other checkers.
func CheckStorageRefused(faults []history.Fault) Result {
	f := NewFinding(NameStorage)
	for _, x := range faults {
		if x.Kind != history.NemStorage || x.Phase != "heal" || x.Storage == nil || x.Storage.Index == 0 {
			continue
		}
		o := x.Storage
		switch {
		case o.Refused || o.Fenced || o.SetAside:
			f.R.Checked++
		case o.Served:
			f.R.Checked++
			what := fmt.Sprintf("its log (raft.db or wal) whose entry %d", o.Index)
			if o.Snapshot != "" {
				what = fmt.Sprintf("a snapshot (%s, index %d) that", o.Snapshot, o.Index)
			}
			f.Invalid(AnomalyServedFromCorruptStore, "%s came up on %s was changed and applied past it without refusing", x.Target, what)
		default:
			f.Unknown("%s neither refused nor served within the watch after entry %d was changed", x.Target, o.Index)
		}
	}
	return f.Done("storage fault")
}
