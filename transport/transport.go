package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// Transport is a raft.Transport over gRPC. It also implements
// raft.WithPreVote and raft.WithClose.
//
// All methods are safe for concurrent use. The client half keeps one
// *grpc.ClientConn per peer address, created on first use and kept until
// Close. The server half is whatever Register attached to a *grpc.Server;
// it forwards RPCs to Consumer until Close.
//
// After Close, every method that talks to a peer returns
// raft.ErrTransportShutdown, open pipelines are closed, in-flight client
// RPCs are cancelled, and the server half answers every RPC with
// codes.Unavailable instead of handing it to raft.
type Transport struct {
	cfg    Config
	logger hclog.Logger

	consumeCh chan raft.RPC

	heartbeatMu sync.RWMutex
	heartbeatFn func(raft.RPC)

	// ctx is the parent of every client RPC; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// shutdownCh is closed by Close; the server half selects on it.
	shutdownCh chan struct{}

	// foreignLogged is the unix-nano time checkClusterID last logged a
	// refusal.
	foreignLogged atomic.Int64

	// votesHeld makes the server half refuse RequestVote and
	// RequestPreVote (HoldVotes).
	votesHeld atomic.Bool

	mu        sync.Mutex // guards the fields below
	shutdown  bool
	conns     map[raft.ServerAddress]*peerConn
	pipelines map[*pipeline]struct{}
}

// peerConn is the lazily created connection to one peer address.
type peerConn struct {
	conn   *grpc.ClientConn
	client transportpb.RaftTransportClient
}

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
)

// New returns a Transport for cfg. It fails with ErrInvalidConfig when
// cfg.Validate does, or when gRPC refuses cfg.DialOptions (for instance when
// they carry no transport credentials). It opens no connection: peers are
// dialled on first use, and the server half serves only once Register has
// attached it to a running *grpc.Server.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	// grpc.NewClient checks the options without dialling; fail here rather
	// than on every RPC.
	probe, err := grpc.NewClient("passthrough:///config-check", cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("%w: DialOptions: %v", ErrInvalidConfig, err)
	}
	_ = probe.Close()
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		cfg:        cfg,
		logger:     logger.Named("transport"),
		consumeCh:  make(chan raft.RPC),
		ctx:        ctx,
		cancel:     cancel,
		shutdownCh: make(chan struct{}),
		conns:      make(map[raft.ServerAddress]*peerConn),
		pipelines:  make(map[*pipeline]struct{}),
	}, nil
}

// Consumer implements raft.Transport. Every RPC received by the server half
// (except heartbeats while a heartbeat handler is set) is sent on this
// unbuffered channel; the receiver must answer each one exactly once through
// its RespChan. InstallSnapshot RPCs carry a Reader over the incoming stream
// that must be read to EOF or error.
func (t *Transport) Consumer() <-chan raft.RPC {
	return t.consumeCh
}

// HoldVotes makes the transport refuse every vote request while hold is
// set, both ways: the server half answers RequestVote and RequestPreVote
// Unavailable before raft sees them, and the client half does not send
// this node's own (ErrVotesHeld); raft counts either as a vote not
// granted. A node whose own log may be missing entries the cluster
// committed (a founder restarted on a wiped data dir that could not yet
// ask the others) holds its votes until it knows: with its vote, a
// candidate missing committed entries could win, and as a candidate it
// could win the votes of founders that hold nothing either. It still
// takes the leader's entries.
func (t *Transport) HoldVotes(hold bool) { t.votesHeld.Store(hold) }

// VotesHeld reports whether HoldVotes holds the votes.
func (t *Transport) VotesHeld() bool { return t.votesHeld.Load() }

// LocalAddr implements raft.Transport; it returns Config.LocalAddr.
func (t *Transport) LocalAddr() raft.ServerAddress {
	return t.cfg.LocalAddr
}

// SetHeartbeatHandler implements raft.Transport. While cb is set, incoming
// heartbeats (AppendEntries with a term and a leader and nothing else) are
// handed to cb on the gRPC handler's goroutine instead of Consumer, so they
// never queue behind disk-bound RPCs. A nil cb restores the normal path.
func (t *Transport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.heartbeatMu.Lock()
	defer t.heartbeatMu.Unlock()
	t.heartbeatFn = cb
}

// EncodePeer implements raft.Transport: the address itself, as bytes.
func (t *Transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport; it inverts EncodePeer.
func (t *Transport) DecodePeer(buf []byte) raft.ServerAddress {
	return raft.ServerAddress(buf)
}

// Close implements raft.WithClose. It is idempotent and returns nil. It
// closes every open pipeline, cancels in-flight client RPCs, closes every
// peer connection and makes the server half refuse RPCs with
// codes.Unavailable; it does not stop the *grpc.Server, which belongs to the
// caller. raft.Raft.Shutdown calls Close itself.
//
// Close returns once the goroutines of every client pipeline have ended.
// Server handlers end on their own: those waiting for raft return
// Unavailable at once; a pipeline or InstallSnapshot stream ends when its
// sender sends the next message, gives up, or the *grpc.Server stops.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.shutdown {
		t.mu.Unlock()
		return nil
	}
	t.shutdown = true
	close(t.shutdownCh)
	t.cancel()
	conns := t.conns
	t.conns = nil
	pipelines := make([]*pipeline, 0, len(t.pipelines))
	for p := range t.pipelines {
		pipelines = append(pipelines, p)
	}
	t.mu.Unlock()

	for _, p := range pipelines {
		_ = p.Close()
	}
	for addr, pc := range conns {
		if err := pc.conn.Close(); err != nil {
			t.logger.Debug("closing peer connection", "peer-address", addr, "error", err)
		}
	}
	return nil
}

// isShutdown reports whether Close has been called.
func (t *Transport) isShutdown() bool {
	select {
	case <-t.shutdownCh:
		return true
	default:
		return false
	}
}

// client returns the client for target, creating its connection on first
// use. grpc.NewClient does not dial; the connection is made by the first RPC.
func (t *Transport) client(target raft.ServerAddress) (transportpb.RaftTransportClient, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shutdown {
		return nil, raft.ErrTransportShutdown
	}
	if pc, ok := t.conns[target]; ok {
		return pc.client, nil
	}
	opts := make([]grpc.DialOption, 0, len(t.cfg.DialOptions)+1)
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  100 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   t.cfg.MaxReconnectDelay,
		},
		MinConnectTimeout: t.cfg.Timeout,
	}))
	opts = append(opts, t.clusterIDDialOptions()...)
	opts = append(opts, t.cfg.DialOptions...)
	dial := string(target)
	if via, ok := t.cfg.PeerRoutes[target]; ok {
		dial = via // unsafe fault injection: see Config.PeerRoutes
	}
	conn, err := grpc.NewClient(dial, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: client for %s: %w", target, err)
	}
	pc := &peerConn{conn: conn, client: transportpb.NewRaftTransportClient(conn)}
	t.conns[target] = pc
	t.logger.Debug("created peer connection", "peer-address", target, "dial", dial)
	return pc.client, nil
}

// callError turns a failed client call into the error raft sees:
// raft.ErrTransportShutdown once Close has been called, otherwise err
// wrapped with the operation and the peer.
func (t *Transport) callError(op string, target raft.ServerAddress, err error) error {
	if t.isShutdown() {
		return raft.ErrTransportShutdown
	}
	var remote *RemoteError
	if errors.As(err, &remote) {
		return err
	}
	return fmt.Errorf("transport: %s to %s: %w", op, target, err)
}

// AppendEntries implements raft.Transport. It returns a *RemoteError when
// the peer's raft answered with an error; resp is filled in either way.
func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	out, err := c.AppendEntries(ctx, t.appendEntriesToPB(args))
	if err == nil {
		err = appendEntriesResponseFromPB(out, resp)
		t.appended(id, sent, args, resp, err)
	}
	if err != nil {
		return t.callError("append-entries", target, err)
	}
	return nil
}

// appendEntriesToPB converts args for the wire, its commit index bounded
// by Config.CommitLimit.
func (t *Transport) appendEntriesToPB(args *raft.AppendEntriesRequest) *transportpb.AppendEntriesRequest {
	msg := appendEntriesRequestToPB(args)
	if t.cfg.CommitLimit != nil {
		msg.LeaderCommitIndex = min(msg.LeaderCommitIndex, t.cfg.CommitLimit())
	}
	return msg
}

// appended reports an answered AppendEntries sent at sent to
// Config.OnAppendEntries, unless its answer did not decode (err is the
// decoder's).
func (t *Transport) appended(id raft.ServerID, sent time.Time, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) {
	if t.cfg.OnAppendEntries != nil && !undecoded(err) {
		t.cfg.OnAppendEntries(id, sent, args, resp)
	}
}

// undecoded reports whether err, from decoding an answer, says the answer
// could not be read (not the peer's raft refusing: a *RemoteError).
func undecoded(err error) bool {
	var remote *RemoteError
	return err != nil && !errors.As(err, &remote)
}

// RequestVote implements raft.Transport, with the error contract of
// AppendEntries.
func (t *Transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.votesHeld.Load() {
		return fmt.Errorf("transport: request-vote to %s: %w", target, ErrVotesHeld)
	}
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	out, err := c.RequestVote(ctx, requestVoteRequestToPB(args))
	if err == nil {
		err = requestVoteResponseFromPB(out, resp)
	}
	if err != nil {
		return t.callError("request-vote", target, err)
	}
	return nil
}

// RequestPreVote implements raft.WithPreVote, with the error contract of
// AppendEntries.
func (t *Transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.votesHeld.Load() {
		return fmt.Errorf("transport: request-pre-vote to %s: %w", target, ErrVotesHeld)
	}
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	out, err := c.RequestPreVote(ctx, requestPreVoteRequestToPB(args))
	if err == nil {
		err = requestPreVoteResponseFromPB(out, resp)
	}
	if err != nil {
		return t.callError("request-pre-vote", target, err)
	}
	return nil
}

// TimeoutNow implements raft.Transport, with the error contract of
// AppendEntries.
func (t *Transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Timeout)
	defer cancel()
	out, err := c.TimeoutNow(ctx, timeoutNowRequestToPB(args))
	if err == nil {
		err = timeoutNowResponseFromPB(out, resp)
	}
	if err != nil {
		return t.callError("timeout-now", target, err)
	}
	return nil
}

// InstallSnapshot implements raft.Transport. It streams args, then data in
// chunks of Config.SnapshotChunkSize, within Timeout × max(1,
// args.Size/SnapshotTimeoutScale). data must yield exactly args.Size bytes;
// otherwise the stream is cancelled and an ErrSnapshotSize error returned.
// It returns a *RemoteError when the peer's raft answered with an error.
func (t *Transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := t.client(target)
	if err != nil {
		return err
	}
	if args.Size < 0 {
		return fmt.Errorf("%w: size %d is negative", ErrSnapshotSize, args.Size)
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.snapshotTimeout(args.Size))
	defer cancel() // also aborts the stream on every early return
	if err := t.sendSnapshot(ctx, c, args, resp, data); err != nil {
		return t.callError("install-snapshot", target, err)
	}
	return nil
}

func (t *Transport) sendSnapshot(ctx context.Context, c transportpb.RaftTransportClient, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	stream, err := c.InstallSnapshot(ctx)
	if err != nil {
		return err
	}
	// sendErr returns the server's status when Send reports io.EOF, which
	// means the server has already ended the stream.
	sendErr := func(err error) error {
		if errors.Is(err, io.EOF) {
			_, err = stream.CloseAndRecv()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
		}
		return err
	}
	first := &transportpb.InstallSnapshotChunk{
		Payload: &transportpb.InstallSnapshotChunk_Request{Request: installSnapshotRequestToPB(args)},
	}
	if err := stream.Send(first); err != nil {
		return sendErr(err)
	}
	buf := make([]byte, t.cfg.SnapshotChunkSize)
	var sent int64
	for {
		n, rerr := io.ReadFull(data, buf)
		if n > 0 {
			if sent+int64(n) > args.Size {
				return fmt.Errorf("%w: reader yields more than %d bytes", ErrSnapshotSize, args.Size)
			}
			// Send marshals before returning, so buf may be reused.
			chunk := &transportpb.InstallSnapshotChunk{
				Payload: &transportpb.InstallSnapshotChunk_Data{Data: buf[:n]},
			}
			if err := stream.Send(chunk); err != nil {
				return sendErr(err)
			}
			sent += int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("transport: reading snapshot: %w", rerr)
		}
	}
	if sent != args.Size {
		return fmt.Errorf("%w: reader yields %d of %d bytes", ErrSnapshotSize, sent, args.Size)
	}
	out, err := stream.CloseAndRecv()
	if err != nil {
		return err
	}
	return installSnapshotResponseFromPB(out, resp)
}
