package transport

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
)

// Defaults applied by New to zero-valued Config fields.
const (
	// DefaultTimeout bounds every RPC but InstallSnapshot, and every wait
	// for one pipelined response.
	DefaultTimeout = 10 * time.Second

	// DefaultSnapshotTimeoutScale is the number of snapshot bytes granted
	// one Timeout: InstallSnapshot gets Timeout × max(1, Size/scale), as in
	// raft's NetworkTransport.
	DefaultSnapshotTimeoutScale = 256 * 1024

	// DefaultSnapshotChunkSize is the size of one data message of the
	// InstallSnapshot stream.
	DefaultSnapshotChunkSize = 256 * 1024

	// DefaultMaxPipelineInFlight is the number of pipelined AppendEntries
	// that may await a response at once. It follows raft's
	// DefaultMaxRPCsInFlight, whose measurements show that deeper pipelines
	// hurt commit latency once raft batches entries.
	DefaultMaxPipelineInFlight = raft.DefaultMaxRPCsInFlight

	// DefaultMaxReconnectDelay caps gRPC's reconnect backoff towards a peer.
	// gRPC's own cap (120 s) would keep a restarted peer unreachable far
	// longer than a raft election takes.
	DefaultMaxReconnectDelay = 2 * time.Second

	// MaxSnapshotChunkSize is the largest SnapshotChunkSize accepted: one
	// chunk plus framing must fit gRPC's default 4 MiB receive limit.
	MaxSnapshotChunkSize = 4<<20 - 64<<10
)

// Config configures a Transport. Zero values become the documented defaults;
// only LocalAddr and the transport credentials in DialOptions are required.
type Config struct {
	// LocalAddr is the address peers dial to reach this node's gRPC server,
	// as stored in the raft configuration. Required.
	LocalAddr raft.ServerAddress

	// Logger receives the transport's logs, under the name "transport".
	// Nil means hclog.Default().
	Logger hclog.Logger

	// DialOptions are passed to grpc.NewClient for every peer, after the
	// transport's own defaults (a reconnect backoff capped at
	// MaxReconnectDelay), so they can override them. They must include
	// transport credentials (grpc.WithTransportCredentials), or every RPC
	// fails.
	DialOptions []grpc.DialOption

	// Timeout bounds each unary RPC, the start of a pipeline stream, each
	// pipelined send and each wait for a pipelined response. Zero means
	// DefaultTimeout.
	Timeout time.Duration

	// SnapshotTimeoutScale is the number of snapshot bytes per Timeout that
	// InstallSnapshot is granted. Zero means DefaultSnapshotTimeoutScale.
	SnapshotTimeoutScale int64

	// SnapshotChunkSize is the size of one InstallSnapshot data message,
	// at most MaxSnapshotChunkSize. Zero means DefaultSnapshotChunkSize.
	SnapshotChunkSize int

	// MaxPipelineInFlight is the number of pipelined AppendEntries that may
	// await a response at once; AppendPipeline.AppendEntries blocks beyond
	// it. One disables pipelining (AppendEntriesPipeline returns
	// raft.ErrPipelineReplicationNotSupported). Zero means
	// DefaultMaxPipelineInFlight.
	MaxPipelineInFlight int

	// MaxReconnectDelay caps the backoff between reconnect attempts to an
	// unreachable peer. Zero means DefaultMaxReconnectDelay.
	MaxReconnectDelay time.Duration

	// PeerRoutes is UNSAFE, for fault injection only (leased
	// --unsafe-peer-route): when the client half dials peer address A, it
	// dials PeerRoutes[A] instead. Connections stay keyed by A; raft never
	// sees the substitute. Nil or empty means every peer is dialled at its
	// own address.
	PeerRoutes map[raft.ServerAddress]string

	// ClusterID, when set, returns the id of the cluster this node belongs
	// to, or "" while it has none (a node that has not joined yet). The
	// client half sends it with every RPC (ClusterIDHeader); the server
	// half refuses, with FailedPrecondition, an RPC from a peer of
	// another cluster. Nil means no id is sent or checked.
	ClusterID func() string

	// OnAppendEntries, when set, is called by the client half once for
	// every AppendEntries that was answered (pipelined or not, heartbeats
	// too, whatever the answer said), with the follower's id, when the
	// request was sent (taken before it was written: the follower
	// received it later), the request and the decoded answer. It runs
	// before raft is handed the answer, on the goroutine that receives it
	// (the caller's, for a unary request), and must not block. The time
	// from sent to the call is the network both ways, the follower's log
	// write and its hand-offs, and for a pipelined request under load also
	// the wait for the leader to read the answer (the pipeline reads the
	// next answer once raft took the previous one). Requests that failed
	// in transit and answers that did not decode are not reported; refused
	// ones are.
	OnAppendEntries func(peer raft.ServerID, sent time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse)

	// CommitLimit, when set, bounds the commit index the client half
	// sends in AppendEntries: it returns how far the leader's own log is
	// on disk. A leader that writes its log while it replicates (raft
	// counts it in a quorum before its write is done) uses it so that a
	// follower applies an entry only once the leader holds it durably as
	// well as the followers raft counted. It is called once per request
	// and must not block.
	CommitLimit func() uint64
}

// DefaultConfig returns a Config with every default filled in; the caller
// still has to set LocalAddr and DialOptions.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// setDefaults replaces zero values with the defaults.
func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SnapshotTimeoutScale == 0 {
		c.SnapshotTimeoutScale = DefaultSnapshotTimeoutScale
	}
	if c.SnapshotChunkSize == 0 {
		c.SnapshotChunkSize = DefaultSnapshotChunkSize
	}
	if c.MaxPipelineInFlight == 0 {
		c.MaxPipelineInFlight = DefaultMaxPipelineInFlight
	}
	if c.MaxReconnectDelay == 0 {
		c.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
}

// Validate reports, wrapped in ErrInvalidConfig, the first field that is out
// of range. Zero values are valid: they stand for the defaults. DialOptions
// are checked by New, which asks gRPC.
func (c *Config) Validate() error {
	d := *c
	d.setDefaults()
	switch {
	case d.LocalAddr == "":
		return fmt.Errorf("%w: LocalAddr is required", ErrInvalidConfig)
	case d.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, d.Timeout)
	case d.SnapshotTimeoutScale < 0:
		return fmt.Errorf("%w: SnapshotTimeoutScale %d is negative", ErrInvalidConfig, d.SnapshotTimeoutScale)
	case d.SnapshotChunkSize < 0 || d.SnapshotChunkSize > MaxSnapshotChunkSize:
		return fmt.Errorf("%w: SnapshotChunkSize %d is outside [1, %d]", ErrInvalidConfig, d.SnapshotChunkSize, MaxSnapshotChunkSize)
	case d.MaxPipelineInFlight < 0:
		return fmt.Errorf("%w: MaxPipelineInFlight %d is negative", ErrInvalidConfig, d.MaxPipelineInFlight)
	case d.MaxReconnectDelay < 0:
		return fmt.Errorf("%w: MaxReconnectDelay %v is negative", ErrInvalidConfig, d.MaxReconnectDelay)
	}
	for from, via := range d.PeerRoutes {
		if from == "" || via == "" {
			return fmt.Errorf("%w: PeerRoutes %q=%q has an empty side", ErrInvalidConfig, from, via)
		}
	}
	return nil
}

// snapshotTimeout is the deadline granted to an InstallSnapshot of size
// bytes: Timeout × max(1, size/SnapshotTimeoutScale), saturating instead of
// overflowing.
func (c *Config) snapshotTimeout(size int64) time.Duration {
	scale := size / c.SnapshotTimeoutScale
	if scale < 1 {
		return c.Timeout
	}
	const maxDuration = time.Duration(1<<63 - 1)
	if scale > int64(maxDuration/c.Timeout) {
		return maxDuration
	}
	return c.Timeout * time.Duration(scale)
}
