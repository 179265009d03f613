package transport

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of Limits (see Limits.WithDefaults).
const (
	// DefaultMaxConnections bounds the open connections of clients and
	// those still in their TLS handshake. Peers' connections are not
	// counted once their certificate names them a peer.
	DefaultMaxConnections = 4096
	// DefaultHandshakeTimeout bounds the TLS handshake and the HTTP/2
	// preface of a new connection (gRPC's own default is 120 s).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a connection that has had no open stream
	// for this long (GOAWAY; a gRPC client reconnects on its next call).
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultMaxStreamsPerConnection bounds the concurrent streams (calls)
	// of one client connection. It is above the default watchers per
	// connection (256) so that a client's unary calls never queue behind
	// its own watchers.
	DefaultMaxStreamsPerConnection = 1024
	// DefaultMaxClientMessage is the receive limit of the client server:
	// the largest valid client request (an AcquireRequest with every name
	// at its 256-byte limit) is under 1 KiB.
	DefaultMaxClientMessage = 64 << 10
	// DefaultMaxPeerMessage is the receive limit of the peer server: one
	// AppendEntries batch (raft's MaxAppendEntries entries, each a group
	// commit of up to MaxBatch commands) or one InstallSnapshot chunk.
	DefaultMaxPeerMessage = 16 << 20

	// MinClientMessage is the smallest MaxClientMessage accepted: every
	// valid client request must fit.
	MinClientMessage = 4 << 10
	// MinPeerMessage is the smallest MaxPeerMessage accepted: an
	// InstallSnapshot chunk (DefaultSnapshotChunkSize) plus framing must
	// fit, and a single large log entry.
	MinPeerMessage = 1 << 20

	// KeepaliveTime is how long a connection may be silent before the
	// server pings it; KeepaliveTimeout is how long it waits for the
	// answer before closing the connection. Together they reclaim the
	// connections (and streams, e.g. watchers) of clients that vanished
	// without a FIN.
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
	// KeepaliveMinTime is the shortest interval between a client's pings
	// the server accepts (with or without open streams); a client pinging
	// more often is sent GOAWAY ("too_many_pings").
	KeepaliveMinTime = 5 * time.Second
	// clientMaxHeaderList bounds the request metadata of one client call
	// (gRPC's default is 16 MiB): a bearer token and a few short keys.
	clientMaxHeaderList = 64 << 10
	// clientStreamWindow and clientConnWindow fix the HTTP/2 flow-control
	// windows of client connections (no BDP growth up to 16 MiB). The
	// stream window is what a client may make the node buffer, unread, on
	// one stream; a connection holds at most MaxStreamsPerConnection of
	// them. The connection window bounds only bytes in transit: gRPC
	// returns it as frames arrive, read or not, so that one stalled
	// stream does not stop the others.
	clientStreamWindow = 64 << 10
	clientConnWindow   = 1 << 20
	// peerStreamWindow and peerConnWindow fix the HTTP/2 flow-control
	// windows of the peer server (without TLS, everyone's) and of a
	// node's connections to its peers (PeerServerOptions,
	// PeerDialOptions). A window left to gRPC is sized by estimating the
	// bandwidth-delay product, and to take each sample the receiver of a
	// message answers it with a PING, which the sender acknowledges: at
	// one request at a time that doubled the writes and wake-ups of each
	// replication round trip (docs/PERFORMANCE.md, "Fixed flow-control
	// windows"). A message larger than the stream window still passes:
	// gRPC opens the window for a message once it has read its length.
	// The stream window is also what a caller that sends and does not
	// read can make the node hold on one stream.
	peerStreamWindow = 1 << 20
	peerConnWindow   = 16 << 20
)

// ErrLimits is returned by Limits.Check; the wrapping error says which
// field is out of range.
var ErrLimits = errors.New("transport: limits")

// Limits bounds what connections and callers may hold on a node's one gRPC
// port. Zero fields mean their defaults (WithDefaults). With TLS, peers and
// clients are told apart by certificate and served by two gRPC servers with
// their own limits (Port); without TLS they cannot be, and one server with
// the peer limits serves both.
type Limits struct {
	// MaxConnections bounds the open TCP connections of clients plus those
	// still in their handshake. Past it, with TLS, up to
	// DefaultHandshakeReserve more may run their handshake (a peer is let
	// in, a client is closed after it unless a slot has freed); past that
	// the connection that has waited longest in its handshake is closed to
	// make room (so a flood of silent connections cannot lock certified
	// callers or peers out). Without TLS the new connection is closed at
	// once.
	MaxConnections int
	// HandshakeTimeout bounds a new connection's TLS handshake and, after
	// it, the HTTP/2 preface (grpc.ConnectionTimeout).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection without open streams for this long
	// (keepalive.ServerParameters.MaxConnectionIdle).
	IdleTimeout time.Duration
	// MaxStreamsPerConnection bounds the concurrent calls of one client
	// connection (HTTP/2 MaxConcurrentStreams; a client queues beyond it).
	// Peer connections are not bounded.
	MaxStreamsPerConnection uint32
	// MaxClientMessage is the largest message the client server receives
	// (larger ones: ResourceExhausted, refused from the message header,
	// before it is buffered).
	MaxClientMessage int
	// MaxPeerMessage is the largest message the peer server receives (and,
	// without TLS, the only server).
	MaxPeerMessage int
}

// DefaultLimits returns Limits with every field at its default.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:          DefaultMaxConnections,
		HandshakeTimeout:        DefaultHandshakeTimeout,
		IdleTimeout:             DefaultIdleTimeout,
		MaxStreamsPerConnection: DefaultMaxStreamsPerConnection,
		MaxClientMessage:        DefaultMaxClientMessage,
		MaxPeerMessage:          DefaultMaxPeerMessage,
	}
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConnections == 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = d.HandshakeTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxStreamsPerConnection == 0 {
		l.MaxStreamsPerConnection = d.MaxStreamsPerConnection
	}
	if l.MaxClientMessage == 0 {
		l.MaxClientMessage = d.MaxClientMessage
	}
	if l.MaxPeerMessage == 0 {
		l.MaxPeerMessage = d.MaxPeerMessage
	}
	return l
}

// Check reports every field of l (after WithDefaults) out of range.
func (l Limits) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrLimits}, args...)...))
	}
	if l.MaxConnections < 1 {
		bad("max connections %d must be at least 1", l.MaxConnections)
	}
	if l.HandshakeTimeout <= 0 {
		bad("handshake timeout %v must be positive", l.HandshakeTimeout)
	}
	if l.IdleTimeout <= 0 {
		bad("idle timeout %v must be positive", l.IdleTimeout)
	}
	if l.MaxStreamsPerConnection < 16 {
		bad("max streams per connection %d must be at least 16", l.MaxStreamsPerConnection)
	}
	if l.MaxClientMessage < MinClientMessage {
		bad("max client message %d must be at least %d bytes (the largest valid client request must fit)", l.MaxClientMessage, MinClientMessage)
	}
	if l.MaxPeerMessage < MinPeerMessage {
		bad("max peer message %d must be at least %d bytes (a snapshot chunk and a large log entry must fit)", l.MaxPeerMessage, MinPeerMessage)
	}
	if l.MaxClientMessage > l.MaxPeerMessage {
		bad("max client message %d exceeds max peer message %d (a forwarded call travels as a peer's)", l.MaxClientMessage, l.MaxPeerMessage)
	}
	return errors.Join(errs...)
}

// common are the options of both servers: handshake and idle timeouts,
// keepalive pings and their enforcement.
func (l Limits) common() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              KeepaliveTime,
			Timeout:           KeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
	}
}

// StreamWorkers is the option that gives a server on the network its
// stream workers (streamWorkers). Not part of the Limits options: an
// in-process server built from them would keep idle workers for callers
// that may never come.
func StreamWorkers() grpc.ServerOption { return grpc.NumStreamWorkers(streamWorkers) }

// streamWorkers is how many goroutines each server keeps to run incoming
// calls. A call that finds one idle runs on that goroutine's already grown
// stack; without workers every call starts a goroutine whose stack grows
// by copying as the handler descends (runtime.copystack was 10 % of a
// leader's CPU under unary renewals from 64 clients, 1.5 % with workers:
// docs/PERFORMANCE.md, "Stream workers and cheaper refusals"). When all
// are busy gRPC starts a goroutine for the call, as without workers, so a
// long call (a waiting Acquire, a watch) holds one worker and never queues
// another call. 128 covers the 64-client benchmarks with room; idle, they
// cost their stacks (8 KiB each until a call grows one).
const streamWorkers = 128

// ClientServerOptions returns the options of the server for clients: the
// common timeouts and keepalive rules, MaxClientMessage, at most
// MaxStreamsPerConnection streams, bounded metadata and fixed flow-control
// windows. What one client connection can make the node hold is then
// bounded by MaxStreamsPerConnection × MaxClientMessage (once gRPC has
// accepted a message's declared length it opens the window for the whole
// message and buffers it) plus 1 MiB of data not yet asked for.
func (l Limits) ClientServerOptions() []grpc.ServerOption {
	return append(l.common(),
		grpc.MaxRecvMsgSize(l.MaxClientMessage),
		grpc.MaxConcurrentStreams(l.MaxStreamsPerConnection),
		grpc.MaxHeaderListSize(clientMaxHeaderList),
		grpc.InitialWindowSize(clientStreamWindow),
		grpc.InitialConnWindowSize(clientConnWindow),
	)
}

// PeerServerOptions returns the options of the server for peers (and,
// without TLS, for everyone): the common timeouts and keepalive rules,
// MaxPeerMessage and fixed flow-control windows; streams are not bounded
// (raft's pipeline and snapshot streams, and calls forwarded by a
// follower for its clients).
func (l Limits) PeerServerOptions() []grpc.ServerOption {
	return append(l.common(), grpc.MaxRecvMsgSize(l.MaxPeerMessage),
		grpc.StaticStreamWindowSize(peerStreamWindow),
		grpc.StaticConnWindowSize(peerConnWindow),
	)
}

// PeerDialOptions returns the options of a node's connections to its
// peers (the Raft transport, forwarded calls): fixed flow-control windows,
// as PeerServerOptions gives the other side.
func PeerDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStaticStreamWindowSize(peerStreamWindow),
		grpc.WithStaticConnWindowSize(peerConnWindow),
	}
}
