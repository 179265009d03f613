package transport

// Conversions between raft's RPC structs and their protobuf mirrors.
//
// Invariants:
//   - toPB functions never fail: every raft value has a protobuf encoding.
//     They share byte slices with their input; the message is marshalled
//     before the call returns, so nothing is retained.
//   - fromPB functions never panic, whatever the input: nil messages, nil
//     headers and out-of-range numbers are reported as ErrInvalidMessage.
//   - Empty and nil byte slices are not distinguished on the wire (proto3):
//     an empty slice arrives as nil. Raft treats both alike.
//   - time.Time travels as google.protobuf.Timestamp: the zero time as an
//     unset field, every other time in UTC without its monotonic reading.

import (
	"math"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// maxEntriesPerRequest is the upper bound raft's ValidateConfig puts on
// MaxAppendEntries; no correct leader sends more entries in one request.
const maxEntriesPerRequest = 1024

func headerToPB(h raft.RPCHeader) *transportpb.RPCHeader {
	return &transportpb.RPCHeader{
		ProtocolVersion: int64(h.ProtocolVersion),
		Id:              h.ID,
		Addr:            h.Addr,
	}
}

func headerFromPB(h *transportpb.RPCHeader) (raft.RPCHeader, error) {
	if h == nil {
		return raft.RPCHeader{}, invalidf("missing header")
	}
	v, err := intFromPB("header.protocol_version", h.GetProtocolVersion())
	if err != nil {
		return raft.RPCHeader{}, err
	}
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(v), ID: h.GetId(), Addr: h.GetAddr()}, nil
}

// intFromPB converts an int64 field to a Go int, refusing values that do not
// fit (only possible where int is 32 bits).
func intFromPB(field string, v int64) (int, error) {
	if v < math.MinInt || v > math.MaxInt {
		return 0, invalidf("%s %d does not fit an int", field, v)
	}
	return int(v), nil
}

func timeToPB(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromPB(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, invalidf("%s: %v", field, err)
	}
	return ts.AsTime(), nil
}

func logToPB(l *raft.Log) *transportpb.Log {
	return &transportpb.Log{
		Index:      l.Index,
		Term:       l.Term,
		Type:       uint32(l.Type),
		Data:       l.Data,
		Extensions: l.Extensions,
		AppendedAt: timeToPB(l.AppendedAt),
	}
}

func logFromPB(i int, l *transportpb.Log) (*raft.Log, error) {
	if l == nil {
		return nil, invalidf("entries[%d] is nil", i)
	}
	if l.GetType() > math.MaxUint8 {
		return nil, invalidf("entries[%d].type %d exceeds %d", i, l.GetType(), math.MaxUint8)
	}
	at, err := timeFromPB("entries.appended_at", l.GetAppendedAt())
	if err != nil {
		return nil, err
	}
	return &raft.Log{
		Index:      l.GetIndex(),
		Term:       l.GetTerm(),
		Type:       raft.LogType(l.GetType()),
		Data:       l.GetData(),
		Extensions: l.GetExtensions(),
		AppendedAt: at,
	}, nil
}

func appendEntriesRequestToPB(r *raft.AppendEntriesRequest) *transportpb.AppendEntriesRequest {
	var entries []*transportpb.Log
	if len(r.Entries) > 0 {
		entries = make([]*transportpb.Log, 0, len(r.Entries))
		for _, e := range r.Entries {
			if e == nil {
				// raft never sends a nil entry; an empty one keeps indices aligned.
				e = &raft.Log{}
			}
			entries = append(entries, logToPB(e))
		}
	}
	return &transportpb.AppendEntriesRequest{
		Header:            headerToPB(r.RPCHeader),
		Term:              r.Term,
		Leader:            r.Leader,
		PrevLogEntry:      r.PrevLogEntry,
		PrevLogTerm:       r.PrevLogTerm,
		Entries:           entries,
		LeaderCommitIndex: r.LeaderCommitIndex,
	}
}

func appendEntriesRequestFromPB(r *transportpb.AppendEntriesRequest) (*raft.AppendEntriesRequest, error) {
	if r == nil {
		return nil, invalidf("missing AppendEntriesRequest")
	}
	h, err := headerFromPB(r.GetHeader())
	if err != nil {
		return nil, err
	}
	if n := len(r.GetEntries()); n > maxEntriesPerRequest {
		return nil, invalidf("%d entries exceed raft's limit of %d", n, maxEntriesPerRequest)
	}
	var entries []*raft.Log
	if n := len(r.GetEntries()); n > 0 {
		entries = make([]*raft.Log, n)
		for i, e := range r.GetEntries() {
			if entries[i], err = logFromPB(i, e); err != nil {
				return nil, err
			}
		}
	}
	return &raft.AppendEntriesRequest{
		RPCHeader:         h,
		Term:              r.GetTerm(),
		Leader:            r.GetLeader(),
		PrevLogEntry:      r.GetPrevLogEntry(),
		PrevLogTerm:       r.GetPrevLogTerm(),
		Entries:           entries,
		LeaderCommitIndex: r.GetLeaderCommitIndex(),
	}, nil
}

func appendEntriesResponseToPB(r *raft.AppendEntriesResponse) *transportpb.AppendEntriesResponse {
	return &transportpb.AppendEntriesResponse{
		Header:         headerToPB(r.RPCHeader),
		Term:           r.Term,
		LastLog:        r.LastLog,
		Success:        r.Success,
		NoRetryBackoff: r.NoRetryBackoff,
	}
}

// appendEntriesResponseFromPB fills out from r. A response that carries only
// an error may lack its header; that is not an error.
func appendEntriesResponseFromPB(r *transportpb.AppendEntriesResponse, out *raft.AppendEntriesResponse) error {
	if r == nil {
		return invalidf("missing AppendEntriesResponse")
	}
	h, err := responseHeaderFromPB(r.GetHeader(), r.GetError())
	if err != nil {
		return err
	}
	*out = raft.AppendEntriesResponse{
		RPCHeader:      h,
		Term:           r.GetTerm(),
		LastLog:        r.GetLastLog(),
		Success:        r.GetSuccess(),
		NoRetryBackoff: r.GetNoRetryBackoff(),
	}
	return remoteError(r.GetError())
}

// responseHeaderFromPB decodes a response header, tolerating its absence
// when the response reports a remote error (raft may answer with an error
// and no response at all).
func responseHeaderFromPB(h *transportpb.RPCHeader, remoteErr string) (raft.RPCHeader, error) {
	if h == nil && remoteErr != "" {
		return raft.RPCHeader{}, nil
	}
	return headerFromPB(h)
}

func requestVoteRequestToPB(r *raft.RequestVoteRequest) *transportpb.RequestVoteRequest {
	return &transportpb.RequestVoteRequest{
		Header:             headerToPB(r.RPCHeader),
		Term:               r.Term,
		Candidate:          r.Candidate,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
}

func requestVoteRequestFromPB(r *transportpb.RequestVoteRequest) (*raft.RequestVoteRequest, error) {
	if r == nil {
		return nil, invalidf("missing RequestVoteRequest")
	}
	h, err := headerFromPB(r.GetHeader())
	if err != nil {
		return nil, err
	}
	return &raft.RequestVoteRequest{
		RPCHeader:          h,
		Term:               r.GetTerm(),
		Candidate:          r.GetCandidate(),
		LastLogIndex:       r.GetLastLogIndex(),
		LastLogTerm:        r.GetLastLogTerm(),
		LeadershipTransfer: r.GetLeadershipTransfer(),
	}, nil
}

func requestVoteResponseToPB(r *raft.RequestVoteResponse) *transportpb.RequestVoteResponse {
	return &transportpb.RequestVoteResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Peers:   r.Peers,
		Granted: r.Granted,
	}
}

func requestVoteResponseFromPB(r *transportpb.RequestVoteResponse, out *raft.RequestVoteResponse) error {
	if r == nil {
		return invalidf("missing RequestVoteResponse")
	}
	h, err := responseHeaderFromPB(r.GetHeader(), r.GetError())
	if err != nil {
		return err
	}
	*out = raft.RequestVoteResponse{
		RPCHeader: h,
		Term:      r.GetTerm(),
		Peers:     r.GetPeers(),
		Granted:   r.GetGranted(),
	}
	return remoteError(r.GetError())
}

func requestPreVoteRequestToPB(r *raft.RequestPreVoteRequest) *transportpb.RequestPreVoteRequest {
	return &transportpb.RequestPreVoteRequest{
		Header:       headerToPB(r.RPCHeader),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func requestPreVoteRequestFromPB(r *transportpb.RequestPreVoteRequest) (*raft.RequestPreVoteRequest, error) {
	if r == nil {
		return nil, invalidf("missing RequestPreVoteRequest")
	}
	h, err := headerFromPB(r.GetHeader())
	if err != nil {
		return nil, err
	}
	return &raft.RequestPreVoteRequest{
		RPCHeader:    h,
		Term:         r.GetTerm(),
		LastLogIndex: r.GetLastLogIndex(),
		LastLogTerm:  r.GetLastLogTerm(),
	}, nil
}

func requestPreVoteResponseToPB(r *raft.RequestPreVoteResponse) *transportpb.RequestPreVoteResponse {
	return &transportpb.RequestPreVoteResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Granted: r.Granted,
	}
}

func requestPreVoteResponseFromPB(r *transportpb.RequestPreVoteResponse, out *raft.RequestPreVoteResponse) error {
	if r == nil {
		return invalidf("missing RequestPreVoteResponse")
	}
	h, err := responseHeaderFromPB(r.GetHeader(), r.GetError())
	if err != nil {
		return err
	}
	*out = raft.RequestPreVoteResponse{
		RPCHeader: h,
		Term:      r.GetTerm(),
		Granted:   r.GetGranted(),
	}
	return remoteError(r.GetError())
}

func installSnapshotRequestToPB(r *raft.InstallSnapshotRequest) *transportpb.InstallSnapshotRequest {
	return &transportpb.InstallSnapshotRequest{
		Header:             headerToPB(r.RPCHeader),
		SnapshotVersion:    int64(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func installSnapshotRequestFromPB(r *transportpb.InstallSnapshotRequest) (*raft.InstallSnapshotRequest, error) {
	if r == nil {
		return nil, invalidf("missing InstallSnapshotRequest")
	}
	h, err := headerFromPB(r.GetHeader())
	if err != nil {
		return nil, err
	}
	v, err := intFromPB("snapshot_version", r.GetSnapshotVersion())
	if err != nil {
		return nil, err
	}
	if r.GetSize() < 0 {
		return nil, invalidf("size %d is negative", r.GetSize())
	}
	return &raft.InstallSnapshotRequest{
		RPCHeader:          h,
		SnapshotVersion:    raft.SnapshotVersion(v),
		Term:               r.GetTerm(),
		Leader:             r.GetLeader(),
		LastLogIndex:       r.GetLastLogIndex(),
		LastLogTerm:        r.GetLastLogTerm(),
		Peers:              r.GetPeers(),
		Configuration:      r.GetConfiguration(),
		ConfigurationIndex: r.GetConfigurationIndex(),
		Size:               r.GetSize(),
	}, nil
}

func installSnapshotResponseToPB(r *raft.InstallSnapshotResponse) *transportpb.InstallSnapshotResponse {
	return &transportpb.InstallSnapshotResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Success: r.Success,
	}
}

func installSnapshotResponseFromPB(r *transportpb.InstallSnapshotResponse, out *raft.InstallSnapshotResponse) error {
	if r == nil {
		return invalidf("missing InstallSnapshotResponse")
	}
	h, err := responseHeaderFromPB(r.GetHeader(), r.GetError())
	if err != nil {
		return err
	}
	*out = raft.InstallSnapshotResponse{
		RPCHeader: h,
		Term:      r.GetTerm(),
		Success:   r.GetSuccess(),
	}
	return remoteError(r.GetError())
}

func timeoutNowRequestToPB(r *raft.TimeoutNowRequest) *transportpb.TimeoutNowRequest {
	return &transportpb.TimeoutNowRequest{Header: headerToPB(r.RPCHeader)}
}

func timeoutNowRequestFromPB(r *transportpb.TimeoutNowRequest) (*raft.TimeoutNowRequest, error) {
	if r == nil {
		return nil, invalidf("missing TimeoutNowRequest")
	}
	h, err := headerFromPB(r.GetHeader())
	if err != nil {
		return nil, err
	}
	return &raft.TimeoutNowRequest{RPCHeader: h}, nil
}

func timeoutNowResponseToPB(r *raft.TimeoutNowResponse) *transportpb.TimeoutNowResponse {
	return &transportpb.TimeoutNowResponse{Header: headerToPB(r.RPCHeader)}
}

func timeoutNowResponseFromPB(r *transportpb.TimeoutNowResponse, out *raft.TimeoutNowResponse) error {
	if r == nil {
		return invalidf("missing TimeoutNowResponse")
	}
	h, err := responseHeaderFromPB(r.GetHeader(), r.GetError())
	if err != nil {
		return err
	}
	*out = raft.TimeoutNowResponse{RPCHeader: h}
	return remoteError(r.GetError())
}

// isHeartbeat reports whether req is a heartbeat as raft's NetworkTransport
// defines one: a term and a leader address, and nothing else. Heartbeats
// take the fast path set by SetHeartbeatHandler.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	leader := req.Addr
	if len(leader) == 0 {
		leader = req.Leader
	}
	return req.Term != 0 && len(leader) > 0 &&
		req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}
