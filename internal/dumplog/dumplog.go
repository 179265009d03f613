// Package dumplog is the schema of `leased dump-log`'s output: one JSON
// Record per line. It has one home so that the writer (cluster.DumpLog)
// and the reader (the jepsen harness, which resolves unknown outcomes from
// the nodes' Raft logs) cannot drift apart field by field. It imports
// nothing of ours.
package dumplog

// Kinds of a Record.
const (
	// KindRange is the first record: which part of the log was replayed.
	KindRange = "range"
	// KindDedup is a request id remembered by the snapshot the replay
	// started from (a grant from before the replayed entries).
	KindDedup = "dedup"
	// KindCommand is one command of a replayed entry, with its result.
	KindCommand = "command"
)

// Record is one line of the dump (JSON). Lease ids are 32 hex digits, as
// clients print them; times are nanoseconds.
type Record struct {
	Kind string `json:"kind"`

	// Range: the store holds entries LogFirst..LogLast; the replay started
	// from the snapshot at SnapshotIndex (0: from an empty state) and
	// covers Replayed..LogLast. FirstAppendedAtNs is the leader's wall
	// clock (Unix ns) when the first replayed entry that carries a stamp
	// was appended, 0 if none does: an entry created after that instant
	// and kept in this log has a higher index, so it was replayed.
	LogFirst          uint64 `json:"log_first,omitempty"`
	LogLast           uint64 `json:"log_last,omitempty"`
	SnapshotIndex     uint64 `json:"snapshot_index,omitempty"`
	Replayed          uint64 `json:"replayed_from,omitempty"`
	FirstAppendedAtNs int64  `json:"first_appended_at_ns,omitempty"`

	// Command (and Dedup: RequestID, Resource, Scope, LeaseID, Token, NowNs
	// = the grant's cluster time).
	Index        uint64 `json:"index,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	AppendedAtNs int64  `json:"appended_at_ns,omitempty"`
	NowNs        int64  `json:"now_ns,omitempty"`
	Type         string `json:"type,omitempty"`
	RequestID    string `json:"request_id,omitempty"`
	Resource     string `json:"resource,omitempty"`
	Scope        string `json:"scope,omitempty"`
	Holder       string `json:"holder,omitempty"`
	LeaseID      string `json:"lease_id,omitempty"`
	Token        uint64 `json:"token,omitempty"`
	// Result: acquire "ok", "replayed" or "refused"; renew "ok" or
	// "refused"; release "released" or "not-released"; tick "ok".
	Result  string `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	Expired int    `json:"expired,omitempty"`
}
