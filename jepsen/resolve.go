package jepsen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/leasefence/leasefence/internal/dumplog"
	"github.com/leasefence/leasefence/jepsen/history"
)

// ResolvedFromRaftLog is Record.ResolvedFrom for an outcome decided from
// the nodes' Raft logs.
const ResolvedFromRaftLog = "raft-log"

// CoverMargin is the slack between the host's wall clock (the leaders'
// AppendedAt stamps in the log) and CLOCK_BOOTTIME (the history) when
// deciding whether a log reaches back to an operation's invocation.
const CoverMargin = time.Second

// LogEntry is one line of `leased dump-log` (dumplog.Record, the schema
// cluster.DumpLog writes): a range record, a request id remembered by the
// snapshot the dump started from, or a replayed command with its result.
type LogEntry = dumplog.Record

// NodeLog is one node's dumped log, reduced to what resolution needs.
type NodeLog struct {
	Node  string
	Range LogEntry
	// ByRequestID holds the acquires of the replayed entries and the
	// starting snapshot's remembered grants (Kind "dedup"), by request id,
	// in log order.
	ByRequestID map[string][]LogEntry
	// Applied is the highest index the node reported applied before it was
	// stopped: entries up to it are committed; entries above it may be a
	// tail that was never committed. 0 means unknown (nothing is taken as
	// committed).
	Applied uint64
}

// ReadLogDump reads `leased dump-log` output for node.
func ReadLogDump(node string, r io.Reader) (*NodeLog, error) {
	n := &NodeLog{Node: node, ByRequestID: map[string][]LogEntry{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 8<<20)
	line, ranges := 0, 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("dump of %s, line %d: %w", node, line, err)
		}
		switch {
		case e.Kind == dumplog.KindRange:
			n.Range = e
			ranges++
		case e.RequestID != "" && (e.Kind == dumplog.KindDedup || e.Type == history.OpAcquire):
			n.ByRequestID[e.RequestID] = append(n.ByRequestID[e.RequestID], e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if ranges != 1 {
		return nil, fmt.Errorf("dump of %s: %d range records, want 1", node, ranges)
	}
	return n, nil
}

// ResolveStats counts what Resolve did; it is part of summary.json.
type ResolveStats struct {
	// Unknown counts acquires whose outcome was unknown and that carry a
	// request id; ResolvedOK of them were found applied (granted),
	// ResolvedNotApplied were absent from (or only refused in) logs that
	// cover their time span, StillUnknown stayed unknown.
	Unknown            int `json:"unknown_acquires"`
	ResolvedOK         int `json:"resolved_ok"`
	ResolvedNotApplied int `json:"resolved_not_applied"`
	StillUnknown       int `json:"still_unknown"`
	// Why some stayed unknown: no majority of logs reaching back to the
	// invocation (compaction), or found only above a node's applied index.
	Uncovered   int `json:"uncovered"`
	Uncommitted int `json:"uncommitted"`
	// UnknownOther counts unknown operations resolution does not handle:
	// renewals, releases, writes, reads (they carry no request id).
	UnknownOther int `json:"unknown_other"`
	// Logs is how many node logs were read.
	Logs int `json:"logs"`
	// A cross-check of the logs against what clients saw: acknowledged
	// acquires found granted in a committed entry with the same lease and
	// token (AckedInLogs), found with another lease or token
	// (AckedMismatch, the first in AckedMismatchExample), or not found
	// (AckedNotInLogs; expected only where compaction took them).
	AckedInLogs          int    `json:"acked_in_logs"`
	AckedMismatch        int    `json:"acked_mismatch"`
	AckedNotInLogs       int    `json:"acked_not_in_logs"`
	AckedMismatchExample string `json:"acked_mismatch_example,omitempty"`
}

// Resolved reports how many unknowns were decided.
func (s ResolveStats) Resolved() int { return s.ResolvedOK + s.ResolvedNotApplied }

// Resolve decides unknown acquires from the nodes' logs and returns the
// history with their completions replaced (ResolvedFrom "raft-log"; the
// original stays in history.jsonl). clusterSize is the number of voters;
// bootOffset converts the log's wall-clock stamps to the history's clock
// (boot = wall + bootOffset).
//
// The rule, for an unknown acquire with request id R invoked at t:
//   - R granted (ok or replayed) in an entry at or below the applied
//     index its node reported, or remembered by the snapshot a dump
//     started from: applied → ok, with the lease id and token of the log.
//   - otherwise R in any entry above its node's applied index: it may be
//     an uncommitted tail → stays unknown.
//   - otherwise (absent, or only refused as held in committed entries): if
//     the replayed logs of a majority of the cluster reach back to before
//     t (never compacted, or their first replayed entry appended at least
//     CoverMargin before t), → fail: a committed entry is on a majority of
//     logs, so it would have been found; else stays unknown.
//
// The outcome's time is not known: a resolved completion keeps the time
// the client gave up, and the checkers treat it as never returned.
func Resolve(h []history.Record, logs []*NodeLog, clusterSize int, bootOffset int64) ([]history.Record, ResolveStats) {
	st := ResolveStats{Logs: len(logs)}
	invokes := map[string]history.Record{}
	out := make([]history.Record, 0, len(h))
	for _, r := range h {
		if r.Kind == history.Invoke {
			invokes[r.Op] = r
		}
		inv, ok := invokes[r.Op]
		if r.Kind == history.Complete && r.Type == history.OpAcquire && r.Result == history.OK && ok && inv.RequestID != "" {
			st.crossCheck(r, inv.RequestID, logs)
		}
		if r.Kind != history.Complete || r.Result != history.Unknown {
			out = append(out, r)
			continue
		}
		rid := inv.RequestID
		if r.Type != history.OpAcquire || !ok || rid == "" {
			st.UnknownOther++
			out = append(out, r)
			continue
		}
		st.Unknown++
		res, why := resolveOne(rid, inv.TimeNs, logs, clusterSize, bootOffset)
		switch res.Result {
		case history.OK:
			st.ResolvedOK++
		case history.Fail:
			st.ResolvedNotApplied++
		default:
			st.StillUnknown++
			if why == "uncommitted" {
				st.Uncommitted++
			} else {
				st.Uncovered++
			}
			out = append(out, r)
			continue
		}
		nr := r
		nr.Result, nr.Token, nr.Lease, nr.ResolvedFrom = res.Result, res.Token, res.Lease, ResolvedFromRaftLog
		nr.Error = "resolved from the raft logs: " + res.Error
		if r.Error != "" {
			nr.Error += " (client: " + r.Error + ")"
		}
		out = append(out, nr)
	}
	return out, st
}

func (st *ResolveStats) crossCheck(r history.Record, rid string, logs []*NodeLog) {
	for _, n := range logs {
		for _, e := range n.ByRequestID[rid] {
			if (e.Result != history.OK && e.Result != "replayed") || (e.Kind != dumplog.KindDedup && (n.Applied == 0 || e.Index > n.Applied)) {
				continue
			}
			if e.LeaseID == r.Lease && e.Token == r.Token {
				st.AckedInLogs++
				return
			}
			st.AckedMismatch++
			if st.AckedMismatchExample == "" {
				st.AckedMismatchExample = fmt.Sprintf("%s acknowledged lease %s token %d; %s index %d has lease %s token %d", r.Op, r.Lease, r.Token, n.Node, e.Index, e.LeaseID, e.Token)
			}
			return
		}
	}
	st.AckedNotInLogs++
}

func resolveOne(rid string, invokedAt int64, logs []*NodeLog, clusterSize int, bootOffset int64) (history.Record, string) {
	var refused []string
	maybe := ""
	for _, n := range logs {
		for _, e := range n.ByRequestID[rid] {
			committed := e.Kind == dumplog.KindDedup || (n.Applied > 0 && e.Index <= n.Applied)
			granted := e.Result == history.OK || e.Result == "replayed"
			switch {
			case granted && committed:
				where := fmt.Sprintf("granted at index %d on %s", e.Index, n.Node)
				if e.Kind == dumplog.KindDedup {
					where = fmt.Sprintf("granted before the snapshot at %d on %s (remembered request id)", n.Range.SnapshotIndex, n.Node)
				}
				return history.Record{Result: history.OK, Token: e.Token, Lease: e.LeaseID, Error: where}, ""
			case !committed && maybe == "":
				maybe = fmt.Sprintf("index %d on %s, above its applied index %d", e.Index, n.Node, n.Applied)
			case committed:
				refused = append(refused, fmt.Sprintf("%d on %s (%s)", e.Index, n.Node, e.Error))
			}
		}
	}
	if maybe != "" {
		return history.Record{Result: history.Unknown, Error: maybe}, "uncommitted"
	}
	var covering []string
	for _, n := range logs {
		if n.Range.Replayed == 1 || (n.Range.FirstAppendedAtNs > 0 && n.Range.FirstAppendedAtNs+bootOffset <= invokedAt-int64(CoverMargin)) {
			covering = append(covering, n.Node)
		}
	}
	if len(covering) <= clusterSize/2 {
		return history.Record{Result: history.Unknown}, "uncovered"
	}
	sort.Strings(covering)
	msg := "not applied: request id absent from the logs of " + strings.Join(covering, ",") + ", which reach back before its invocation"
	if len(refused) > 0 {
		msg = "not applied: only refused, at " + strings.Join(refused, "; ")
	}
	return history.Record{Result: history.Fail, Error: msg}, ""
}
