// Package history is the harness's record of a run: the operations of
// history.jsonl (Record: invocations, completions, observations of the
// watcher), the faults of nemesis.jsonl (Fault, with what a storage or
// membership nemesis observed), the writer both are appended with, and
// CLOCK_BOOTTIME, the one clock every process of a run stamps with.
// Checkers, the nemesis, the workers and the report all read and write
// these; history imports nothing of the harness.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/leasefence/leasefence/client"
)

// Kinds of a Record.
const (
	Invoke   = "invoke"
	Complete = "complete"
	// Observe is an observation that is not an operation of a worker: a
	// lease event of the cluster's replicated log seen by the harness's
	// watcher, or a gap in that stream.
	Observe = "observe"
)

// Operation types.
const (
	OpAcquire = "acquire"
	OpWrite   = "write"
	OpRead    = "read"
	OpRenew   = "renew"
	OpRelease = "release"
	// OpEvent is a lease event (Record.Event) seen by the watcher.
	OpEvent = "event"
	// OpWatchGap records that the watcher may have missed events.
	OpWatchGap = "watch-gap"
	// OpReuse sends an earlier acquire's request id again, with one
	// parameter changed (Record.Changed) or, Changed empty, as an identical
	// duplicate long after the first answer. A lease it is answered with is
	// in Value (api.FormatLeaseID form) and Token, never in Lease: no other checker treats
	// it as a grant.
	OpReuse = "reuse"
	// OpProbeWrite is the restore nemesis's probe's fenced write to
	// fencedkv (a type of its own: its keys have no final read, unlike
	// the workers' writes).
	OpProbeWrite = "probe-write"
)

// Results of a completion.
const (
	OK      = "ok"
	Fail    = "fail"
	Unknown = "unknown"
)

// Record is one line of history.jsonl: one invocation, one completion, or
// one observation. Times are CLOCK_BOOTTIME nanoseconds, one system-wide
// clock shared by the harness and every worker process on the host, so
// times of different processes compare.
type Record struct {
	Kind   string `json:"kind"`
	Worker string `json:"worker"`
	// Op identifies the operation; its invocation and completion share it.
	Op     string `json:"op"`
	Type   string `json:"type"`
	TimeNs int64  `json:"time_ns"`

	// Arguments.
	Resource string `json:"resource,omitempty"`
	// Element is the unique element a write appends to the resource's key.
	Element string `json:"element,omitempty"`
	// RequestID is the idempotency key an acquire was sent with
	// (RequestIDOf(Op)); it finds the acquire in the nodes' Raft logs.
	RequestID string `json:"request_id,omitempty"`
	// Changed is the parameter an OpReuse changed: resource, scope,
	// holder, ttl or wait; empty for an identical duplicate.
	Changed string `json:"changed,omitempty"`

	// Outcome (completions).
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	// Token and Lease (id in api.FormatLeaseID form) of the lease the operation was made under.
	Token uint64 `json:"token,omitempty"`
	Lease string `json:"lease,omitempty"`
	// SafeUntilNs is the end of the client library's safe window
	// (Lease.SafeUntil) on the shared clock, as known at this record.
	SafeUntilNs int64 `json:"safe_until_ns,omitempty"`
	// Value is what a read returned.
	Value string `json:"value,omitempty"`
	// AppliedIndex is, for a linearizable lease read, the index of the
	// last log entry the answering state reflects (GetResponse.applied_index).
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	// ResolvedFrom is set on a completion of resolved.jsonl whose outcome
	// was unknown in history.jsonl and was decided afterwards ("raft-log":
	// from the nodes' Raft logs; see Resolve). Its TimeNs is still when
	// the client gave up, not when the operation took effect: checkers
	// treat a resolved operation as one that never returned, with a known
	// outcome.
	ResolvedFrom string `json:"resolved_from,omitempty"`

	// Lease events (Type OpEvent): the event, the cluster time it was
	// applied at, and the lease's cluster-time interval.
	Event       string `json:"event,omitempty"`
	Position    string `json:"position,omitempty"`
	ClusterNow  int64  `json:"cluster_now_ns,omitempty"`
	GrantedAt   int64  `json:"granted_at_ns,omitempty"`
	ExpiresAt   int64  `json:"expires_at_ns,omitempty"`
	EventHolder string `json:"holder,omitempty"`

	// Keep-alive counts of one lease (Type OpKeepAlive, keepalive.go).
	HeldNs     int64 `json:"held_ns,omitempty"`
	IntervalNs int64 `json:"interval_ns,omitempty"`
	Renewals   int   `json:"renewals,omitempty"`
	Streams    int   `json:"streams,omitempty"`
}

// Now returns the shared clock's reading (CLOCK_BOOTTIME) in nanoseconds.
func Now() int64 { return int64(client.BootClock{}.Now()) }

// Writer appends records to a JSONL stream. Safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
	n   int
}

// NewWriter returns a Writer on w. Call Flush before closing w.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &Writer{w: bw, enc: enc}
}

// Write appends one record (a Record, a Fault, ...).
func (w *Writer) Write(r any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	return w.enc.Encode(r)
}

// Flush writes buffered records out.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Flush()
}

// Len returns the number of records written.
func (w *Writer) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// ReadHistory reads a JSONL history.
func ReadHistory(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 8<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return out, fmt.Errorf("history line %d: %w", line, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// ReadHistoryFile reads a history.jsonl file.
func ReadHistoryFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHistory(f)
}

// Fault is one line of nemesis.jsonl: a fault started or healed.
type Fault struct {
	// Phase is "start" or "heal".
	Phase string `json:"phase"`
	// Kind is the nemesis: kill, pause, client-pause.
	Kind string `json:"kind"`
	// Target is the process it hit (node id or worker id); Leader tells
	// whether the node was the leader when hit.
	Target string `json:"target"`
	Leader bool   `json:"leader,omitempty"`
	TimeNs int64  `json:"time_ns"`
	// Detail says what was observed (e.g. the token a paused worker held
	// and the newer one that was accepted meanwhile).
	Detail string `json:"detail,omitempty"`
	// Effective is set on heal when the fault was verified to have taken
	// effect (the process was seen stopped, killed, ...).
	Effective bool `json:"effective,omitempty"`
	// Storage is what a node did after NemStorage changed its store (on
	// heal).
	Storage *StorageOutcome `json:"storage,omitempty"`
	// Membership is what NemMemberUnreachable's adds were answered and
	// what the nodes listed (on heal).
	Membership *MembershipOutcome `json:"membership,omitempty"`
	// LostVoter is what a node did when NemLostVoter started it again on
	// an empty data dir under its old id (on heal).
	LostVoter *LostVoterOutcome `json:"lost_voter,omitempty"`
}
