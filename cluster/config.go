package cluster

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasefence/leasefence/transport"
)

// Config configures a Node. Zero values become the defaults of
// DefaultConfig; Validate checks the fields against each other.
type Config struct {
	// ID names this node in the Raft configuration. Required, stable for
	// the life of the data dir.
	ID string
	// Listen is the host:port the gRPC server binds (peers and clients share
	// it). Port 0 picks a free port; Node.Addr tells which.
	Listen string
	// Listener, when set, is the listener the node serves peers and clients
	// on instead of binding Listen (an embedding application that owns its
	// sockets, e.g. from systemd). The node owns it: Close closes it, and
	// so does a Start that fails. Its address is Node.Addr unless
	// Advertise is set.
	Listener net.Listener
	// Advertise is the address peers and clients use to reach this node.
	// Empty means the bound listen address.
	Advertise string
	// DataDir holds raft.db (the stable store: term and vote; and the log
	// with LogStore "boltdb"), wal/ (the log with LogStore "wal") and
	// snapshots/.
	DataDir string
	// LogStore chooses where the Raft log lives: LogStoreBoltDB (in
	// raft.db, with the stable store) or LogStoreWAL (raft-wal segment
	// files in DataDir/wal). Empty means the data dir's own store, and
	// LogStoreWAL for a new data dir. The choice is recorded in raft.db on
	// a first start and fixed for the life of the data dir: a node started
	// with the other store named refuses to start (walstore.go,
	// checkLogStoreChoice).
	LogStore string
	// Bootstrap lists every member of a new cluster (id -> address),
	// including this node. It is used only on a first start (empty data
	// dir), and every founding node must be given the same list.
	Bootstrap map[string]string
	// Join is the address of a running member to ask for admission on a
	// first start. Ignored when the data dir has state or Bootstrap is set.
	Join string
	// Nonvoter joins as a non-voting member.
	Nonvoter bool
	// RestoreFrom names a backup file (from ClusterService.Snapshot,
	// `leasectl snapshot save`) to start a new cluster from. Used only on a
	// first start, with Bootstrap; every founding node gets the same file.
	RestoreFrom string
	// BumpTokens is how far a restore raises the cluster's token floor
	// above the highest token in the backup (any scope, or the backup's
	// own floor), so that new tokens in every scope, scopes the backup
	// never saw included, beat every token issued after the backup was
	// taken, as long as no scope made more than BumpTokens grants after it.
	// Zero means DefaultBumpTokens (2^32) unless AllowZeroBump is set.
	BumpTokens    uint64
	AllowZeroBump bool
	// RestoreEpoch is required when RestoreFrom seeds a data dir (a
	// restart over a seeded data dir ignores both, though an epoch given
	// must still be one Validate accepts): the Unix time, in seconds, at
	// which this restore began, the same on every founding node (read the
	// clock once and give all of them the value), and greater than every
	// earlier restore's. The floor is at least the epoch's line
	// ((RestoreEpoch - EpochBase) × EpochTokens), and the epoch is part of
	// the new cluster's id, so restoring a backup again (the cluster an
	// earlier restore started was lost before anyone backed it up), or an
	// older one after a chain of restores, never reissues tokens granted
	// before, and no node of an earlier restore joins the new one. At most
	// MaxRestoreEpoch.
	RestoreEpoch uint64

	// MinTTL and MaxTTL bound the ttl of an Acquire.
	MinTTL, MaxTTL time.Duration
	// SkewMargin is the safety buffer added when deciding expiry: a lease
	// past expires_at cannot be renewed, and its resource cannot be granted
	// again until expires_at + SkewMargin. TTLs must exceed 2 x SkewMargin.
	SkewMargin time.Duration
	// Drift is the bound on clock rate drift the cluster assumes (reported
	// to clients, used in their safe deadline). Default 1e-4.
	Drift float64
	// Tick is the longest the leader waits between time ticks (each one an
	// expiry batch, possibly empty). Default 1s.
	Tick time.Duration
	// MaxExpirePerTick bounds how many leases one tick entry removes.
	MaxExpirePerTick int
	// MaxBatch bounds how many client commands share one Raft entry.
	MaxBatch int
	// ApplyTimeout bounds how long a command waits to enter the Raft log.
	ApplyTimeout time.Duration
	// MaxPending bounds the renewals and releases of held leases the
	// leader has admitted and not yet answered (queued for the group
	// commit or in Raft); past it they are refused with ResourceExhausted,
	// reason OVERLOADED and a RetryInfo (nothing proposed). Default
	// 16384: the renewals of 100 000 leases kept alive every second arrive
	// in bursts of thousands (a keep-alive message carries up to 1024), and
	// with 4096 the bursts were refused and sent again, which cost more
	// than they saved (70 900/s served of 100 000/s asked, against every
	// one with 16384; docs/PERFORMANCE.md, "Renewals in messages").
	// Renewals of leases with under a third of their ttl left have a
	// second budget of this size (propose.go, classUrgent).
	MaxPending int
	// MaxPendingGrants is the same bound for new grants (Acquire), counted
	// apart: a refused grant costs its caller nothing, a refused renewal
	// can cost a live lease, so grants get the smaller budget and are
	// refused first; their own budget keeps renewals from starving them.
	// At most MaxPending. Default 1024.
	MaxPendingGrants int

	// Raft timing. See hashicorp/raft's Config for their meaning. With
	// LeaderLeaseTimeout below HeartbeatTimeout (the defaults: 450 ms,
	// 500 ms) a follower checks its leader's silence every twentieth of
	// the heartbeat timeout rather than at raft's random timer
	// (leadercontact.go).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	// TrailingLogs is how many entries raft keeps after a snapshot. It
	// must be at least SnapshotThreshold (Validate), so that the log still
	// reaches back to the previous snapshot: when the newest snapshot turns
	// out unreadable at start, raft falls back to the previous one and
	// replays the log from there. While the snapshot policy raises the
	// threshold, it raises the trailing logs in the same proportion.
	// Default twice the threshold: a snapshot can come later than the
	// threshold (raft checks every SnapshotInterval).
	TrailingLogs uint64
	// SnapshotThresholdMax is as far as the node raises SnapshotThreshold
	// while the state is large (snapshotPolicy); 0 means 64 times
	// SnapshotThreshold, and SnapshotThreshold itself pins it.
	SnapshotThresholdMax uint64

	// MetricsListen is the host:port of the HTTP server for /metrics
	// (Prometheus) and /healthz; empty means none.
	MetricsListen string
	// Registerer, when set, receives the node's metrics as well (an
	// embedding application's registry), each with the constant label
	// node=<ID> so that several nodes in one process do not collide; the
	// Go runtime and process collectors are left to the application. They
	// are unregistered on Close. The node's own registry (Node.Registry,
	// MetricsListen) keeps every metric either way.
	Registerer prometheus.Registerer
	// Pprof adds /debug/pprof/ to the metrics server. Off by default: it
	// exposes internals and can be made to burn CPU.
	Pprof bool
	// StatusPage adds a read-only HTML status page (/ and /status) to the
	// metrics server: members, live leases, the last watch events, the
	// clock settings. With a policy only an administrator's bearer token
	// opens it. leased turns it on by default with --insecure
	// (--status-page).
	StatusPage bool

	// TLS names the PEM files of mutual TLS on the gRPC port (peers and
	// clients alike): all three, or none for plaintext. See
	// transport.LoadTLS for what is required of each.
	TLS transport.TLSFiles
	// PeerIdentity is the URI SAN that marks node certificates; empty means
	// transport.DefaultPeerIdentity. With TLS, only a caller whose
	// certificate carries it may call the Raft transport service.
	PeerIdentity string
	// Insecure serves plaintext gRPC without TLS: local development only
	// (anyone who reaches the port can take every lease and speak Raft).
	// Validate refuses a Config with neither TLS files nor Insecure, as
	// leased refuses to start without --tls-* or --insecure: an embedded
	// node is held to the same rule. Status lists it as unsafe "insecure".
	Insecure bool
	// GRPCReflection serves gRPC server reflection on the gRPC port (the
	// public services only; with a policy, to administrators only), for
	// grpcurl and other generic clients. leased turns it on by default with
	// --insecure (--grpc-reflection).
	GRPCReflection bool

	// WatchBuffer is how many recent events each node keeps so that
	// watchers can resume from a position.
	WatchBuffer int

	// Policy, when set, turns authorization on (see Policy): every call
	// needs a known identity and is checked against its grant. nil with
	// PolicyFile empty means everything is allowed to everyone.
	Policy *Policy
	// PolicyFile names a JSON policy loaded at start when Policy is nil.
	PolicyFile string

	// MaxWaitersPerResource bounds the callers queued (Acquire with wait)
	// on one resource at the leader; past it, ResourceExhausted.
	// Default 1024.
	MaxWaitersPerResource int
	// MaxWatchersPerClient bounds the open Watch streams of one identity
	// (with a policy) or of one connection (without); past it,
	// ResourceExhausted. Default 256.
	MaxWatchersPerClient int
	// RefusalKeep is how long the request id of a refused Acquire (without
	// wait) is remembered, so that a late copy of the request is refused
	// again instead of granting what its client was told it did not get.
	// It must cover how long a client retries one request id (the Go
	// client's RequestTimeout + RetryFor is about 20 s). Grants' request
	// ids are kept MaxTTL + SkewMargin. Default 2m; at least 30s.
	RefusalKeep time.Duration
	// MaxRefusals caps the refused request ids remembered; adding one past
	// it forgets the oldest first (metric
	// leasefence_dedup_refusals_evicted_total). It bounds the memory a
	// storm of refused polls can take: about 110 B of heap and as much of
	// snapshot per entry (fsm/DESIGN.md). Default 1 000 000.
	MaxRefusals int
	// MaxLeasesPerIdentity bounds the live leases one identity holds, with
	// a policy only (leases are counted by their holder label, which the
	// server prefixes with the identity); past it, Acquire is refused with
	// ResourceExhausted. Default 10000.
	MaxLeasesPerIdentity int

	// Clock is the node's monotonic clock; nil means the process's own.
	// Tests inject one to step or skew it.
	Clock Clock
	// Logger receives the node's logs (and raft's). nil means hclog's
	// default at Info.
	Logger hclog.Logger

	// StateCheckEvery: every node hashes its state right after applying
	// the first command entry at or past each multiple of this many log
	// indexes, and nodes compare these hashes (cluster/DESIGN.md,
	// "Replicas compare state"); the interval doubles with each doubling
	// of the leases beyond 64 Ki. Each costs a copy of the expiry heap on
	// the apply path and an encoding of the state off it. 0: 4096.
	StateCheckEvery uint64
	// StateCheckPoll is how often a node compares its state checkpoints
	// with the other voters'. 0: 5s.
	StateCheckPoll time.Duration
	// Limits bounds connections, streams and messages on the gRPC port
	// (transport.Limits; servers.go): zero fields become
	// transport.DefaultLimits.
	Limits transport.Limits

	// Unsafe holds the fault-injection settings, which exist in every
	// build (leased's hidden --unsafe-* flags): each weakens the node, is
	// logged at start and reported in Status.unsafe.
	Unsafe UnsafeSettings
	// Testing holds the node's test switches (TestingKnobs): planted
	// defects in a build with the plantedbugs tag, nothing in a release
	// build, where the type is empty. Validate refuses an unknown planted
	// bug. Status lists each one switched on as unsafe "planted-bug:NAME".
	Testing TestingKnobs
}

// UnsafeSettings are a node's fault-injection settings (Config.Unsafe),
// for the jepsen harness and tests only; the zero value is a safe node.
type UnsafeSettings struct {
	// FaultClockFile, when set, makes the node's clock an unsafe
	// FaultClock controlled by this JSON file (polled every
	// FaultClockPoll; see FaultClockControl; leased
	// --unsafe-fault-clock). Status then lists "fault-clock" as unsafe
	// and reports the clock's rate and wall offset. Excludes
	// Config.Clock.
	FaultClockFile string
	// PeerRoutes (leased --unsafe-peer-route, used by jepsen's proxy
	// mode): when this node dials peer address A (Raft transport,
	// forwarding to the leader, joining), it dials PeerRoutes[A] instead.
	// Whoever owns the substitute address sees and can delay or cut this
	// node's traffic to A. Reported in Status.unsafe as "peer-route". Keys
	// and values are host:port.
	PeerRoutes map[string]string
}

// DefaultConfig returns a Config with every tunable at its documented
// default. ID, DataDir and one of Bootstrap/Join must still be set.
func DefaultConfig() Config {
	return Config{
		Listen:             "127.0.0.1:7001",
		MinTTL:             2 * time.Second,
		MaxTTL:             10 * time.Minute,
		SkewMargin:         500 * time.Millisecond,
		Drift:              1e-4,
		Tick:               time.Second,
		MaxExpirePerTick:   1024,
		MaxBatch:           1024,
		ApplyTimeout:       5 * time.Second,
		MaxPending:         16384,
		MaxPendingGrants:   1024,
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 450 * time.Millisecond,
		CommitTimeout:      20 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  16384,
		TrailingLogs:       32768,
		WatchBuffer:        65536,

		RefusalKeep:           2 * time.Minute,
		MaxRefusals:           1000000,
		MaxWaitersPerResource: 1024,
		MaxWatchersPerClient:  256,
		MaxLeasesPerIdentity:  10000,

		StateCheckEvery: 4096,
		StateCheckPoll:  5 * time.Second,
		Limits:          transport.DefaultLimits(),
		LogStore:        defaultLogStore,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.LogStore == "" {
		c.LogStore = d.LogStore
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.MinTTL, d.MinTTL)
	setDur(&c.MaxTTL, d.MaxTTL)
	setDur(&c.SkewMargin, d.SkewMargin)
	setDur(&c.Tick, d.Tick)
	setDur(&c.ApplyTimeout, d.ApplyTimeout)
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.CommitTimeout, d.CommitTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	setDur(&c.RefusalKeep, d.RefusalKeep)
	if c.MaxRefusals == 0 {
		c.MaxRefusals = d.MaxRefusals
	}
	if c.Drift == 0 {
		c.Drift = d.Drift
	}
	if c.MaxExpirePerTick == 0 {
		c.MaxExpirePerTick = d.MaxExpirePerTick
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.MaxPending == 0 {
		c.MaxPending = d.MaxPending
	}
	if c.MaxPendingGrants == 0 {
		c.MaxPendingGrants = min(d.MaxPendingGrants, c.MaxPending)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = max(d.TrailingLogs, 2*c.SnapshotThreshold)
	}
	if c.SnapshotThresholdMax == 0 {
		c.SnapshotThresholdMax = c.SnapshotThreshold * snapshotThresholdScale
	}
	if c.WatchBuffer == 0 {
		c.WatchBuffer = d.WatchBuffer
	}
	if c.MaxWaitersPerResource == 0 {
		c.MaxWaitersPerResource = d.MaxWaitersPerResource
	}
	if c.MaxWatchersPerClient == 0 {
		c.MaxWatchersPerClient = d.MaxWatchersPerClient
	}
	if c.MaxLeasesPerIdentity == 0 {
		c.MaxLeasesPerIdentity = d.MaxLeasesPerIdentity
	}
	if c.StateCheckEvery == 0 {
		c.StateCheckEvery = d.StateCheckEvery
	}
	setDur(&c.StateCheckPoll, d.StateCheckPoll)
	c.Limits = c.Limits.WithDefaults()
	if c.Clock == nil && c.Unsafe.FaultClockFile == "" { // Start sets the fault clock
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "leased", Level: hclog.Info})
	}
	return c
}

// Validate reports every problem with c at once, as hashicorp/raft's
// ValidateConfig does for raft's Config; every rule a Config alone can
// break lives here (Start calls it after filling defaults, before it opens
// anything; an embedding application may call it earlier; leased only
// parses flags into a Config and calls it). Besides required fields and
// ranges, it checks fields against each other: the min ttl against twice
// the skew margin, the skew margin against the drift a lease of max ttl
// can accumulate (skew margin >= drift x max ttl, DESIGN.md "Time"), min
// against max ttl, the leader lease and election timeouts against the
// heartbeat timeout, the trailing logs against the snapshot threshold (and
// its maximum against it), the bootstrap list against the id and its
// addresses against each other, a restore against the bootstrap list,
// pprof against the metrics address, a policy against a policy file, a
// fault clock file against a Clock, planted bugs against the names this
// build knows, and the TLS files against each other
// and against Insecure (one of the two is required). When all that holds,
// the raft configuration Start would build must pass raft.ValidateConfig
// (its minimum timeouts, e.g. heartbeat and election at least 5ms).
// It reads no files: what the data dir holds, and the address the node
// binds, are checked when the node opens them (Start).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ID == "" {
		bad("id is required")
	} else if err := ValidateNodeID(c.ID); err != nil {
		bad("id %q: %v", c.ID, err)
	}
	if c.DataDir == "" {
		bad("data dir is required")
	}
	switch c.LogStore {
	case "", LogStoreBoltDB, LogStoreWAL:
	default:
		bad("log store %q: want %q or %q", c.LogStore, LogStoreBoltDB, LogStoreWAL)
	}
	tlsGiven := c.TLS.CertFile != "" || c.TLS.KeyFile != "" || c.TLS.CAFile != ""
	switch {
	case c.Insecure && tlsGiven:
		bad("insecure (--insecure) and TLS files (--tls-*) exclude each other")
	case !c.Insecure && !tlsGiven:
		bad("no TLS configured: give TLS files (--tls-cert, --tls-key and --tls-ca; make certs writes development ones), or choose insecure (--insecure) to serve plaintext for local development")
	}
	if c.Listen == "" && c.Listener == nil {
		bad("listen address is required")
	}
	if len(c.Bootstrap) > 0 {
		if _, ok := c.Bootstrap[c.ID]; !ok {
			bad("bootstrap list must include this node's id %q", c.ID)
		}
		addrs := map[string]string{}
		for id, a := range c.Bootstrap {
			if id == "" || a == "" {
				bad("bootstrap entry %q=%q is incomplete", id, a)
			} else if err := ValidateNodeID(id); err != nil {
				bad("bootstrap id %q: %v", id, err)
			} else if err := ValidatePeerAddr(a); err != nil {
				bad("bootstrap address %q of %s: %v", a, id, err)
			}
			if other, dup := addrs[a]; dup {
				bad("bootstrap address %s given to both %s and %s", a, other, id)
			}
			addrs[a] = id
		}
	}
	if c.RestoreFrom != "" && len(c.Bootstrap) == 0 {
		bad("restoring from a backup needs the new cluster's bootstrap list")
	}
	if c.RestoreEpoch != 0 && (c.RestoreEpoch < EpochBase || c.RestoreEpoch > MaxRestoreEpoch) {
		bad("restore epoch %d is not the Unix time in seconds of a restore (between %d and %d; milliseconds given?)", c.RestoreEpoch, EpochBase, MaxRestoreEpoch)
	}
	if c.SkewMargin < 0 {
		bad("skew margin %v must not be negative", c.SkewMargin)
	}
	if c.MinTTL <= 2*c.SkewMargin {
		bad("min ttl %v must exceed 2 x skew margin (%v)", c.MinTTL, 2*c.SkewMargin)
	}
	if c.MaxTTL < c.MinTTL {
		bad("max ttl %v is below min ttl %v", c.MaxTTL, c.MinTTL)
	}
	// A lease of max ttl measured on a clock drifting by Drift is off by
	// up to Drift x MaxTTL; the margin must cover it (DESIGN.md, Time).
	if drifted := time.Duration(c.Drift * float64(c.MaxTTL)); c.Drift > 0 && drifted > c.SkewMargin {
		bad("skew margin %v does not cover the drift of a max-ttl lease (drift %g x max ttl %v = %v): raise the skew margin to at least %v or lower the max ttl to at most %v",
			c.SkewMargin, c.Drift, c.MaxTTL, drifted, drifted, time.Duration(float64(c.SkewMargin)/c.Drift))
	}
	if c.TrailingLogs < c.SnapshotThreshold {
		bad("trailing logs %d are below the snapshot threshold %d: the log must reach back to the previous snapshot, or a node whose newest snapshot is unreadable cannot start", c.TrailingLogs, c.SnapshotThreshold)
	}
	if c.SnapshotThresholdMax != 0 && c.SnapshotThresholdMax < c.SnapshotThreshold {
		bad("snapshot threshold max %d is below the snapshot threshold %d", c.SnapshotThresholdMax, c.SnapshotThreshold)
	}
	if c.Drift < 0 || c.Drift >= 0.1 {
		bad("drift %g must lie in [0, 0.1)", c.Drift)
	}
	if c.Tick <= 0 {
		bad("tick %v must be positive", c.Tick)
	}
	if c.MaxExpirePerTick < 1 || c.MaxBatch < 1 {
		bad("max expire per tick and max batch must be at least 1")
	}
	if c.MaxPendingGrants < 1 || c.MaxPendingGrants > c.MaxPending {
		bad("max pending grants %d must lie in [1, max pending %d]", c.MaxPendingGrants, c.MaxPending)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		bad("leader lease timeout %v must not exceed heartbeat timeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		bad("election timeout %v must not be below heartbeat timeout %v", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.Pprof && c.MetricsListen == "" {
		bad("pprof needs a metrics listen address")
	}
	for from, via := range c.Unsafe.PeerRoutes {
		_, _, err1 := net.SplitHostPort(from)
		_, _, err2 := net.SplitHostPort(via)
		if err1 != nil || err2 != nil {
			bad("peer route %q=%q: both sides must be host:port", from, via)
		}
	}
	if err := c.TLS.Check(); err != nil {
		errs = append(errs, err)
	}
	if c.PeerIdentity != "" {
		if err := transport.CheckPeerIdentity(c.PeerIdentity); err != nil {
			errs = append(errs, err)
		}
	}
	if c.WatchBuffer < 16 {
		bad("watch buffer %d must be at least 16", c.WatchBuffer)
	}
	if c.MaxWaitersPerResource < 1 || c.MaxWatchersPerClient < 1 || c.MaxLeasesPerIdentity < 1 {
		bad("max waiters per resource (%d), watchers per client (%d) and leases per identity (%d) must be at least 1",
			c.MaxWaitersPerResource, c.MaxWatchersPerClient, c.MaxLeasesPerIdentity)
	}
	if c.RefusalKeep < 30*time.Second {
		bad("refusal keep %v must be at least 30s: a client retries one request id for about 20s", c.RefusalKeep)
	}
	if c.MaxRefusals < 1 {
		bad("max refusals %d must be at least 1", c.MaxRefusals)
	}
	if c.Policy != nil && c.PolicyFile != "" {
		bad("give a policy or a policy file, not both")
	}
	if c.Unsafe.FaultClockFile != "" && c.Clock != nil {
		bad("a fault clock file and a Clock exclude each other")
	}
	if err := c.Testing.validate(); err != nil {
		bad("testing knobs: %v", err)
	}
	if err := c.Limits.WithDefaults().Check(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// What raft itself refuses (only once ours hold: its first error
		// would repeat one of ours in its own words).
		if err := raft.ValidateConfig(c.raftConfig()); err != nil {
			bad("raft config: %v", err)
		}
	}
	return errors.Join(errs...)
}

// raftConfig is the raft configuration of a node with c: raft's defaults
// with c's id, timing and snapshot settings (and c.Logger's "raft" child,
// when c has a logger).
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	if c.Logger != nil {
		rc.Logger = c.Logger.Named("raft")
	}
	return rc
}

// ParsePeers parses "n1=host:port,n2=host:port" into a bootstrap map.
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("cluster: peer %q is not id=host:port", part)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("cluster: peer id %q listed twice", id)
		}
		out[id] = addr
	}
	return out, nil
}

// FormatPeers is the inverse of ParsePeers, sorted by id.
func FormatPeers(m map[string]string) string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + "=" + m[id]
	}
	return strings.Join(parts, ",")
}
