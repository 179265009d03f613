package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
	"github.com/leasefence/leasefence/transport"
)

// Version is reported by Status.
var Version = "0.1.0-dev"

// Node is one leasefence server: a Raft member with the lease state
// machine, serving peers and clients on one gRPC port. All methods are safe
// for concurrent use.
type Node struct {
	cfg   Config
	log   hclog.Logger
	clock Clock
	// faultClock is clock when Config.Unsafe.FaultClockFile is set (unsafe).
	faultClock *FaultClock

	raft  *raft.Raft
	sm    *stateMachine
	snaps *snapshotPolicy
	// snapStore holds the node's snapshots (raft's file store).
	snapStore raft.SnapshotStore
	hub       *hub
	tr        *transport.Transport
	store     *raftboltdb.BoltStore
	// walStore closes the raft-wal log store (Config.LogStore "wal").
	walStore io.Closer
	// llog is raft's log store: the leader writes it while it replicates
	// (leaderlog.go); set before raft starts.
	llog   *leaderLog
	server *servers // behind lis (servers.go)
	lis    net.Listener
	// inproc serves DialInProcess's in-memory connections and chain
	// holds the node's interceptors, for RegisterServices (inprocess.go).
	inproc *inProcess
	chain  interceptors
	addr   string

	metrics   *metrics
	health    *health.Server
	httpSrv   *http.Server
	httpAddr  string
	lead      atomic.Pointer[leaderState]
	acks      *peerAcks // what the peers accepted, for readIndex
	proposeCh chan *proposal
	// inflight holds a token while an entry of the group commit is in
	// Raft (proposeLoop); batchFull says a full batch is waiting.
	inflight  chan struct{}
	batchFull chan struct{}
	adm       *admission // propose.go
	fwd       *forwarder
	waiters   *waitQueues
	leases    *leaseService
	admin     *clusterService
	policy    *Policy // nil: everything allowed (authz.go)
	watchers  *clientWatchers

	stopCh chan struct{}
	// reloadMu orders raft.ReloadConfig's read-modify-write between the
	// snapshot policy and the leader-contact nudge.
	reloadMu  sync.Mutex
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	fatal     atomic.Pointer[error]

	// clusterID is the cluster id of the node identity (identity.go),
	// empty until the node has one; a leader hands it to joining nodes,
	// and the transport reads it on every Raft RPC (no lock).
	clusterID atomic.Pointer[string]
	// corrupt is why this node's state differs from the majority's
	// (statecheck.go); nil while it does not.
	corrupt atomic.Pointer[string]
}

// leaderState is this node's view of its own leadership for one term. It
// exists only after the term's barrier has applied.
type leaderState struct {
	term uint64
	// Cluster time is base + (clock.Now() - monoBase): the last applied
	// cluster time at the barrier, advanced by this node's monotonic clock.
	base     int64
	monoBase time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	// wallClock is the planted wall-clock-time defect (Config.Testing).
	wallClock bool
}

func (ls *leaderState) now(c Clock) int64 {
	if ls.wallClock {
		return wallNanos(c)
	}
	return ls.base + int64(c.Now()-ls.monoBase)
}

// Start opens the data dir, binds the listener, starts Raft and serves. On
// a first start it bootstraps (cfg.Bootstrap) or asks to join (cfg.Join).
// The returned Node serves until Close. It is StartContext without a
// deadline.
func Start(cfg Config) (*Node, error) { return StartContext(context.Background(), cfg) }

// StartContext is Start bounded by ctx: if ctx ends before the node
// serves, it undoes what it started (listener, raft, data dir lock) and
// returns an error that wraps ctx.Err(). The node does not wait for a
// leader; Node.Leader and the health service say when one is known.
// ctx bounds only the start: the node then serves until Close or
// Shutdown.
func StartContext(ctx context.Context, cfg Config) (*Node, error) {
	n, err := start(ctx, cfg)
	if err != nil && cfg.Listener != nil {
		_ = cfg.Listener.Close() // the node owns it, also when it does not start
	}
	return n, err
}

func start(ctx context.Context, cfg Config) (*Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: start: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: invalid config: %w", err)
	}
	var fc *FaultClock
	if cfg.Unsafe.FaultClockFile != "" {
		fc = NewFaultClock(cfg.Unsafe.FaultClockFile, cfg.Logger.Named("fault-clock"))
		fc.Poll() // a control file present at start applies from the start
		cfg.Clock = fc
		cfg.Logger.Warn("UNSAFE: fault-injection clock enabled", "control-file", cfg.Unsafe.FaultClockFile)
	}
	if len(cfg.Unsafe.PeerRoutes) > 0 {
		cfg.Logger.Warn("UNSAFE: peer routes enabled (fault injection only): this node's traffic to these peers goes through whoever owns the substitute addresses",
			"routes", FormatPeers(cfg.Unsafe.PeerRoutes))
	}
	if !cfg.TLS.Enabled() {
		cfg.Logger.Warn("serving plaintext gRPC without TLS (development only): anyone who reaches the port can take, renew and release every lease, "+
			"change membership, and call the Raft transport: TimeoutNow forces elections, AppendEntries and RequestVote with a high term depose the leader",
			"listen", cfg.Listen)
	}
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.Named("node").With("node-id", cfg.ID),
		clock:     cfg.Clock,
		hub:       newHub(cfg.WatchBuffer),
		proposeCh: make(chan *proposal, 2*cfg.MaxPending+cfg.MaxPendingGrants+4*cfg.MaxBatch), // admitted commands (held, urgent, grants) never wait to enter it
		inflight:  make(chan struct{}, 1),
		batchFull: make(chan struct{}, 1),
		adm:       newAdmission(),
		stopCh:    make(chan struct{}),
	}
	n.faultClock = fc
	n.sm = newStateMachine(n.hub, cfg.Logger.Named("fsm"), n.onFatal, n.fsmOptions()...)
	n.waiters = newWaitQueues()
	n.acks = newPeerAcks()
	n.watchers = newClientWatchers()
	policy, err := cfg.loadPolicy()
	if err != nil {
		return nil, err
	}
	n.policy = policy
	n.metrics = newMetrics(n)
	if err := n.metrics.both.err(); err != nil {
		n.metrics.both.unregisterHost()
		return nil, err
	}
	n.sm.metrics = n.metrics
	n.snaps = newSnapshotPolicy(cfg.SnapshotThreshold, cfg.SnapshotThresholdMax, cfg.TrailingLogs)
	n.sm.snaps = n.snaps
	n.sm.checks = newStateCheckpoints(cfg.StateCheckEvery)
	if err := n.open(ctx); err != nil {
		n.cleanup()
		return nil, err
	}
	return n, nil
}

// started is the error of a start that ctx ended, if it did.
func started(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: start: %w", err)
	}
	return nil
}

// open brings the node up in steps, each on what the one before opened:
// the data dir, the Raft stores, the port, the gRPC servers and the
// transport, Raft itself, the node identity, the metrics server, the
// loops. A step that fails returns at once; start then closes whatever
// the steps before it opened (cleanup), so a failed start leaves no lock,
// port or goroutine behind (TestStartFailingHalfWayLeavesNothingOpen). ctx
// is checked between the steps that take time.
func (n *Node) open(ctx context.Context) error {
	ident, err := n.checkDataDir()
	if err != nil {
		return err
	}
	rs, err := n.openRaftStores(ctx, ident)
	if err != nil {
		return err
	}
	if err := started(ctx); err != nil {
		return err
	}
	if err := n.listen(); err != nil {
		return err
	}
	if err := n.buildServers(); err != nil {
		return err
	}
	if !rs.existing && ident == nil && n.cfg.Join != "" && len(n.cfg.Bootstrap) == 0 && n.cfg.RestoreFrom == "" && !n.planted(BugLostVoterUnchecked) {
		if err := n.checkNotALostVoter(ctx); err != nil {
			return err
		}
	}
	hold, err := n.holdVotes(ctx, rs, ident)
	if err != nil {
		return err
	}
	existing, err := n.startRaft(ctx, rs)
	if err != nil {
		return err
	}
	if err := n.recordIdentity(ident, rs, existing); err != nil {
		return err
	}
	if err := started(ctx); err != nil {
		return err
	}
	if err := n.startHTTP(); err != nil {
		return err
	}
	n.startLoops(existing, hold)
	n.log.Info("node started", "addr", n.addr, "data-dir", n.cfg.DataDir, "existing-state", existing)
	return nil
}

// checkDataDir refuses, before anything is opened or created, a data dir
// of another node, an identity whose raft.db is gone, a first start with
// neither bootstrap list nor join address, and a raft.db bbolt cannot
// trust (checkBoltFile); then it makes the data dir. It returns the node
// identity, nil when the data dir has none yet.
func (n *Node) checkDataDir() (*Identity, error) {
	cfg := n.cfg
	dbPath := filepath.Join(cfg.DataDir, "raft.db")
	ident, err := readIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if ident != nil {
		if ident.NodeID != cfg.ID {
			return nil, fmt.Errorf("cluster: data dir %s belongs to node %q (its %s), not %q: start it with that id, or give node %q a data dir of its own",
				cfg.DataDir, ident.NodeID, IdentityFile, cfg.ID, cfg.ID)
		}
		// Checked before bbolt opens the file: opening an empty file
		// would write a new database into it.
		if fi, err := os.Stat(dbPath); err != nil || fi.Size() == 0 {
			return nil, lostStateError(cfg.DataDir, ident, "raft.db is missing or empty")
		}
	}
	if len(cfg.Bootstrap) == 0 && cfg.Join == "" && cfg.RestoreFrom == "" {
		// Refused before anything is created (checked again in
		// openRaftStores, for a raft.db without state).
		if fi, err := os.Stat(dbPath); err != nil || fi.Size() == 0 {
			return nil, fmt.Errorf("cluster: %s holds no raft state: a first start needs a bootstrap list (--bootstrap) or a member to join through (--join)", cfg.DataDir)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	if fi, err := os.Stat(dbPath); err == nil && fi.Size() > 0 {
		if err := checkBoltFile(dbPath); err != nil {
			return nil, fmt.Errorf("%w: replace this node: remove it from the cluster, empty the data dir and start it with --join (docs/OPERATIONS.md, Replacing a dead node)", err)
		}
	}
	return ident, nil
}

// raftStores are the stores openRaftStores opened for raft, and what they
// hold.
type raftStores struct {
	store   *raftboltdb.BoltStore // the stable store (also n.store)
	checked *checkedLogStore      // the log store, checked (corrupt.go)
	logs    *leaderLog            // checked, behind the log cache and the leader's writer
	snaps   *checkedSnapshotStore
	// existing: the data dir holds raft state (a term, a log or a
	// snapshot).
	existing bool
}

// openRaftStores opens raft.db (waiting for another process's lock within
// ctx's deadline), the log store, the snapshot store and the log cache,
// refuses a corrupt entry or newest snapshot, and reads whether the data
// dir holds raft state. It refuses a data dir whose identity says it had a
// term that raft.db no longer holds, and a first start with nothing to
// bootstrap, restore or join. What it opened is on n (store, walStore)
// for cleanup, also when it fails.
func (n *Node) openRaftStores(ctx context.Context, ident *Identity) (raftStores, error) {
	cfg := n.cfg
	dbPath := filepath.Join(cfg.DataDir, "raft.db")
	var store *raftboltdb.BoltStore
	lockWait := dataDirLockWait // for another process to let go of raft.db
	if dl, ok := ctx.Deadline(); ok {
		lockWait = max(min(lockWait, time.Until(dl)), time.Millisecond)
	}
	var logStore raft.LogStore // store, or raft-wal (walstore.go)
	var kind string            // the data dir's log store (cfg.LogStore may be empty)
	if err := guardDisk(dbPath, func() (err error) {
		store, logStore, n.walStore, kind, err = openStores(cfg.DataDir, cfg.LogStore, lockWait, n.log)
		return err
	}); err != nil {
		if errors.Is(err, bbolt.ErrTimeout) && lockWait < dataDirLockWait {
			return raftStores{}, fmt.Errorf("cluster: start: waiting for %s, held open by another process: %w", dbPath, context.DeadlineExceeded)
		}
		return raftStores{}, err // a held lock: openLogStoreWithin names the holder
	}
	n.store = store
	n.cfg.LogStore = kind
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, cfg.Logger.Named("snapshots"))
	if err != nil {
		return raftStores{}, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	if d, ok := logStore.(*durableWAL); ok && !n.planted(BugWALEmptiedOnInstall) {
		// What a whole-log deletion keeps (walstore.go); called by raft
		// once it runs, after n.llog is set.
		d.installed = func() (uint64, uint64, bool) { return installedSnapshot(n.llog.raft.Load(), fileSnaps) }
	}
	// Integrity (corrupt.go, logstore.go): refuse to start on a corrupt
	// entry or newest snapshot; stop when one is read later.
	checked, snaps, err := n.checkStores(logStore, fileSnaps)
	if err != nil {
		return raftStores{}, err
	}
	n.snapStore = snaps
	checked.writes = n.metrics.logWrite
	cache, err := raft.NewLogCache(1024, checked)
	if err != nil {
		return raftStores{}, err
	}
	logs, err := newLeaderLog(cache)
	if err != nil {
		return raftStores{}, fmt.Errorf("cluster: reading raft state: %w", err)
	}
	n.llog = logs
	logs.onFail = n.onFatal

	var existing bool
	var term uint64
	if err := guardDisk(dbPath, func() (err error) {
		if existing, err = raft.HasExistingState(logs, store, snaps); err != nil {
			return fmt.Errorf("cluster: reading raft state: %w", err)
		}
		if term, err = store.GetUint64([]byte("CurrentTerm")); err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return fmt.Errorf("cluster: reading raft state: %w", err)
		}
		return nil // a corrupt newest snapshot: checkStores above
	}); err != nil {
		return raftStores{}, err
	}
	if ident != nil && term == 0 {
		// An identity is written only once the node has a term.
		return raftStores{}, lostStateError(cfg.DataDir, ident, "raft.db holds no term or vote")
	}
	if existing && len(cfg.Bootstrap) > 0 {
		n.log.Info("data dir has raft state; ignoring the bootstrap list", "data-dir", cfg.DataDir)
	}
	if existing && cfg.Join != "" {
		n.log.Info("data dir has raft state; ignoring the join address", "join", cfg.Join)
	}
	if !existing && len(cfg.Bootstrap) == 0 && cfg.Join == "" && cfg.RestoreFrom == "" {
		return raftStores{}, fmt.Errorf("cluster: %s holds no raft state: a first start needs a bootstrap list (--bootstrap) or a member to join through (--join)", cfg.DataDir)
	}
	return raftStores{store: store, checked: checked, logs: logs, snaps: snaps, existing: existing}, nil
}

// listen takes the node's port (Config.Listener, or a listener on
// Config.Listen) and settles the address peers reach it at, which must be
// the one the bootstrap list gives it. The listener is on n (lis) for
// cleanup, also when the address is refused.
func (n *Node) listen() error {
	cfg := n.cfg
	var err error
	if cfg.Listener != nil {
		n.lis = cfg.Listener
	} else if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("cluster: listen: %w", err)
	}
	n.addr = cfg.Advertise
	if n.addr == "" {
		if ta, ok := n.lis.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
			return fmt.Errorf("cluster: listening on %s: set an advertise address peers can reach", n.lis.Addr())
		}
		n.addr = n.lis.Addr().String()
	}
	if len(cfg.Bootstrap) > 0 && cfg.Bootstrap[cfg.ID] != n.addr {
		return fmt.Errorf("cluster: bootstrap list gives %s the address %s, but it serves %s", cfg.ID, cfg.Bootstrap[cfg.ID], n.addr)
	}
	return nil
}

// buildServers builds, on the port, everything that serves or dials: the
// interceptors (with TLS, the peer guard), the Raft transport, the
// forwarder, the gRPC servers with every service registered, and the
// in-process server. Nothing serves yet (startLoops).
func (n *Node) buildServers() error {
	cfg := n.cfg
	var err error
	// Mutual TLS (opt-in): nodes dial each other (raft transport,
	// forwarding, join) with their own peer certificate.
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	var srvTLS *tls.Config
	recoverUnary, recoverStream := transport.RecoverInterceptors(n.log)
	unaryInts := []grpc.UnaryServerInterceptor{recoverUnary, n.corruptGuardUnary}
	streamInts := []grpc.StreamServerInterceptor{recoverStream, n.corruptGuardStream}
	if cfg.TLS.Enabled() {
		serverTLS, peerTLS, err := transport.LoadTLS(cfg.TLS, cfg.PeerIdentity)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		dial = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(peerTLS))}
		srvTLS = serverTLS
		pu, ps := transport.PeerInterceptors(cfg.PeerIdentity, n.log)
		unaryInts = append(unaryInts, pu)
		streamInts = append(streamInts, ps)
	}
	dial = append(dial, transport.PeerDialOptions()...)
	var routes map[raft.ServerAddress]string
	for from, via := range cfg.Unsafe.PeerRoutes {
		if routes == nil {
			routes = map[raft.ServerAddress]string{}
		}
		routes[raft.ServerAddress(from)] = via
	}
	// Followers apply only what the leader holds on disk too
	// (leaderlog.go, rule 2); raft runs after n.llog is set. The planted
	// leader-applies-unwritten sends raft's commit index unbounded.
	var commitLimit func() uint64
	if !n.planted(BugLeaderUnwritten) {
		commitLimit = func() uint64 { return n.llog.Durable() }
	}
	n.tr, err = transport.New(transport.Config{
		LocalAddr:   raft.ServerAddress(n.addr),
		Logger:      cfg.Logger,
		DialOptions: dial,
		PeerRoutes:  routes,
		ClusterID:   n.peerClusterID(),
		OnAppendEntries: func(peer raft.ServerID, sent time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
			n.acks.record(peer, sent, req, resp)
			if len(req.Entries) > 0 {
				n.metrics.replication.WithLabelValues(string(peer)).Observe(time.Since(sent).Seconds())
			}
		},
		CommitLimit: commitLimit,
	})
	if err != nil {
		return err
	}
	n.fwd = newForwarder(dial, cfg.Unsafe.PeerRoutes)
	n.leases = &leaseService{n: n}
	n.admin = &clusterService{n: n}
	n.server = newServers(n.lis, srvTLS, cfg, n.log,
		grpc.ForceServerCodecV2(transport.ServerCodec()), // with RejectMalformed: bad protobuf is InvalidArgument
		grpc.ChainUnaryInterceptor(unaryInts...), grpc.ChainStreamInterceptor(streamInts...))
	n.chain = interceptors{unary: chainUnary(unaryInts), stream: chainStream(streamInts)}
	n.inproc = newInProcess(append(cfg.Limits.WithDefaults().ClientServerOptions(),
		grpc.ForceServerCodecV2(transport.ServerCodec()),
		grpc.ChainUnaryInterceptor(unaryInts...), grpc.ChainStreamInterceptor(streamInts...))...)
	n.health = health.NewServer()
	n.inproc.register(n)
	calls := transport.NewCallServer(chainUnary(unaryInts))
	calls.Add(&api.LeaseService_ServiceDesc, n.leases)
	n.server.register(func(s grpc.ServiceRegistrar) {
		n.tr.Register(s)
		calls.Register(s)
		s.RegisterService(transport.RejectMalformed(&api.LeaseService_ServiceDesc), n.leases)
		s.RegisterService(transport.RejectMalformed(&api.ClusterService_ServiceDesc), n.admin)
		healthpb.RegisterHealthServer(s, n.health)
		if cfg.GRPCReflection {
			n.registerReflection(s)
		}
	})
	return nil
}

// startRaft seeds the stores from Config.RestoreFrom on a first start,
// starts raft on them and, on a first start with a bootstrap list, records
// the founding cluster id and bootstraps. existing reports whether raft
// started with state (held before, or seeded now). raft is on n (raft)
// for cleanup, also when the bootstrap fails.
func (n *Node) startRaft(ctx context.Context, rs raftStores) (existing bool, err error) {
	cfg := n.cfg
	existing = rs.existing
	store, snaps := rs.store, rs.snaps
	rc := cfg.raftConfig() // raft.ValidateConfig passed in Validate
	if cfg.RestoreFrom != "" {
		if existing {
			n.log.Warn("data dir has state; ignoring the backup to restore from", "file", cfg.RestoreFrom)
		} else {
			if err := n.seedFromBackup(store, snaps); err != nil {
				return existing, err
			}
			existing = true // the seeded snapshot holds the configuration
		}
	}
	if err := started(ctx); err != nil {
		return existing, err
	}
	n.sm.logs = rs.logs
	n.sm.durable = rs.logs
	if n.planted(BugLeaderUnwritten) {
		n.sm.applyEarly = true
		slow := func() { time.Sleep(plantedWriteDelay) }
		rs.logs.testBeforeWrite.Store(&slow)
	}
	if n.planted(BugReadRaftApplied) {
		applied := 0 // raft's FSM goroutine only
		hold := func(*raft.Log) {
			if applied++; applied%plantedApplyEvery == 0 && n.lead.Load() != nil {
				time.Sleep(plantedApplyHold)
			}
		}
		n.sm.testBeforeApply.Store(&hold)
	}
	if err := guardDisk(cfg.DataDir, func() (err error) {
		n.raft, err = raft.NewRaft(rc, n.sm, rs.logs, store, snaps, n.tr)
		return err
	}); err != nil {
		return existing, fmt.Errorf("cluster: start raft: %w", err)
	}
	n.llog.raft.Store(n.raft)
	rs.checked.onCorrupt.set(n.onFatal)
	snaps.onCorrupt.set(n.onFatal)
	if !existing && len(cfg.Bootstrap) > 0 {
		if err := setFoundingClusterID(store, clusterIDOf(cfg.Bootstrap, "")); err != nil {
			return existing, err
		}
		var servers []raft.Server
		for id, addr := range cfg.Bootstrap {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
		}
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return existing, fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	return existing, nil
}

// recordIdentity writes the node identity file when this start (or one
// that stopped before the file) bootstrapped or restored the data dir, or
// when the data dir predates identity files, and hands the cluster id to
// the transport (setClusterID). existing is startRaft's; rs.existing says
// whether the data dir held state before this start.
func (n *Node) recordIdentity(ident *Identity, rs raftStores, existing bool) error {
	cfg := n.cfg
	hadState := rs.existing // before this start: not a first start
	if ident == nil && (existing || len(cfg.Bootstrap) > 0) {
		// Bootstrapped or restored by this start or by one that stopped
		// before it wrote the file (the founding id was stored first), or
		// a data dir from before identity files (its cluster id is
		// unknown: empty, never derived from this start's flags, which it
		// ignores): from here on a wipe is caught.
		id, err := foundingClusterID(rs.store)
		if err != nil {
			return err
		}
		if id == "" && !hadState {
			id = clusterIDOf(cfg.Bootstrap, "")
		}
		ident = &Identity{ClusterID: id, NodeID: cfg.ID, Created: time.Now().UTC()}
		if err := writeIdentity(cfg.DataDir, *ident); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(cfg.DataDir, JoinMarkerFile)) // the identity guards from here on
		n.log.Info("node identity written", "file", filepath.Join(cfg.DataDir, IdentityFile), "cluster-id", ident.ClusterID)
	}
	if ident != nil {
		n.setClusterID(ident.ClusterID)
	}
	return nil
}

// startLoops serves and starts the node's goroutines (on n.wg): the gRPC
// and in-process servers, health, leadership, leader following, proposals,
// snapshots, state checks, the fault clock when set, on a first start
// that joins, the join loop, and while the node holds its votes (hold),
// the founders' watch. Nothing here fails.
func (n *Node) startLoops(existing, hold bool) {
	cfg := n.cfg
	n.wg.Add(5)
	go func() { defer n.wg.Done(); n.server.serve() }()
	go func() { defer n.wg.Done(); n.inproc.serve(n.log) }()
	go func() { defer n.wg.Done(); n.healthLoop() }()
	go func() { defer n.wg.Done(); n.leaderLoop() }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.followLeader() }()
	go func() { defer n.wg.Done(); n.proposeLoop() }()
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.snaps.run(n, time.Second, n.stopCh) }()
	go func() { defer n.wg.Done(); n.watchLeaderContact(n.stopCh) }()
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.sm.checks.run(n.stopCh, n.log) }()
	go func() { defer n.wg.Done(); n.stateCheckLoop() }()
	if n.faultClock != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.faultClock.Run(n.stopCh, FaultClockPoll) }()
	}
	if !existing && len(cfg.Bootstrap) == 0 && cfg.Join != "" {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.joinLoop() }()
	}
	if hold {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.watchFounders() }()
	}
}

// Addr returns the address this node serves peers and clients on.
func (n *Node) Addr() string { return n.addr }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Config returns the node's effective configuration.
func (n *Node) Config() Config { return n.cfg }

// IsLeader reports whether this node leads and has applied its term's
// barrier (so it serves writes and linearizable reads).
func (n *Node) IsLeader() bool { return n.lead.Load() != nil }

// Leader returns the id and address of the leader this node knows of.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// AppliedIndex returns the index of the last log entry this node applied.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// LeaseServer returns the node's LeaseService implementation, for an
// application that embeds the node and calls it without a network hop.
func (n *Node) LeaseServer() api.LeaseServiceServer { return n.leases }

// ClusterServer returns the node's ClusterService implementation.
func (n *Node) ClusterServer() api.ClusterServiceServer { return n.admin }

// Raft exposes the underlying raft instance to tests and tools in this
// module. Changing its configuration behind the node's back is unsupported.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Err returns the fatal error that stopped the node, if any.
func (n *Node) Err() error {
	if p := n.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) onFatal(err error) {
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	n.fatal.CompareAndSwap(nil, &err)
	n.log.Error("node failed; shutting down", "error", err)
	_ = n.Close()
}

// Close stops the node: Shutdown with twice the election timeout for the
// leadership hand-over. Close is idempotent.
func (n *Node) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.ElectionTimeout)
	defer cancel()
	return n.Shutdown(ctx)
}

// Shutdown stops the node. A leader first hands leadership to another
// voter, waiting for it until ctx ends, so that clients see a short
// failover instead of a lost leader; a leader that is the only voter has
// no one to hand it to and stops at once. Then it stops serving, stops
// Raft and closes the data dir; that part does not wait for ctx. Shutdown
// and Close are idempotent: later calls return the first one's error.
func (n *Node) Shutdown(ctx context.Context) error {
	n.closeOnce.Do(func() {
		n.handOver(ctx)
		close(n.stopCh)
		n.closeErr = n.cleanup()
		n.wg.Wait()
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// handOver transfers leadership to another voter before a stop, if this
// node leads and has one.
func (n *Node) handOver(ctx context.Context) {
	if n.raft == nil || n.raft.State() != raft.Leader || n.Err() != nil {
		return
	}
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	others := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.cfg.ID) {
			others++
		}
	}
	if others == 0 {
		n.log.Debug("the only voter stops: no leadership to hand over")
		return
	}
	f := n.raft.LeadershipTransfer()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			n.log.Warn("leadership transfer before stop failed", "error", err)
		} else {
			n.log.Info("leadership handed over before stop")
		}
	case <-ctx.Done():
		n.log.Warn("leadership transfer before stop timed out", "error", ctx.Err())
	}
}

func (n *Node) cleanup() error {
	var errs []error
	if ls := n.lead.Swap(nil); ls != nil {
		ls.cancel()
	}
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.server != nil {
		// Stops the servers and closes the port, and with it the
		// listener: also after a start that failed before Serve.
		n.server.stop(time.Second)
	} else if n.lis != nil {
		n.lis.Close()
	}
	if n.inproc != nil {
		n.inproc.stop(time.Second)
	}
	if n.httpSrv != nil {
		_ = n.httpSrv.Close()
	}
	if n.metrics != nil {
		n.metrics.both.unregisterHost()
	}
	if n.tr != nil {
		if err := n.tr.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.fwd != nil {
		n.fwd.close()
	}
	if n.llog != nil {
		if err := n.llog.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.walStore != nil {
		if err := n.walStore.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leaderLoop follows raft's leadership signal. On gaining leadership it
// commits a barrier, then takes the last applied cluster time as its base
// (DESIGN.md, Time); only then does the node serve as leader.
func (n *Node) leaderLoop() {
	for {
		select {
		case <-n.stopCh:
			return
		case isLeader := <-n.raft.LeaderCh():
			if old := n.lead.Swap(nil); old != nil {
				old.cancel()
			}
			if !isLeader {
				n.log.Info("lost leadership")
				continue
			}
			if n.refuseLeadership() { // a corrupt state never leads
				continue
			}
			term := n.raft.CurrentTerm()
			// Retry the barrier while still leading: giving up would leave
			// a leader that never serves.
			var err error
			for {
				if err = n.await(context.Background(), n.raft.Barrier(n.cfg.ApplyTimeout)); err == nil ||
					errors.Is(err, ErrStopped) || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
					break
				}
				n.log.Warn("barrier after election failed; retrying", "term", term, "error", err)
				select {
				case <-n.stopCh:
				case <-time.After(50 * time.Millisecond):
				}
			}
			if err != nil {
				n.log.Warn("barrier after election failed", "term", term, "error", err)
				continue
			}
			var base int64
			n.sm.read(func(st *fsm.State) { base = st.Now() })
			ctx, cancel := context.WithCancel(context.Background())
			ls := &leaderState{term: term, base: base, monoBase: n.clock.Now(), ctx: ctx, cancel: cancel, wallClock: n.planted(BugWallClockTime)}
			n.lead.Store(ls)
			n.log.Info("leading", "term", term, "cluster-time", time.Duration(base))
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.tickLoop(ls) }()
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.recordServedLoop(ls) }()
		}
	}
}

// tickLoop proposes a Tick at least every cfg.Tick, and as soon as the
// earliest lease passes expires_at + skew_margin, so that cluster time
// advances and expired leases leave the state (cost proportional to what
// expires: the FSM pops its expiry heap).
func (n *Node) tickLoop(ls *leaderState) {
	margin := int64(n.cfg.SkewMargin)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ls.ctx.Done():
			return
		case <-n.stopCh:
			return
		case <-timer.C:
		}
		res, err := n.propose(ls.ctx, &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: uint32(n.cfg.MaxExpirePerTick)}}})
		next := n.cfg.Tick
		if err == nil && res.Expired >= n.cfg.MaxExpirePerTick {
			next = 0 // more to expire: go on at once
		} else {
			var exp int64
			var ok bool
			n.sm.read(func(st *fsm.State) { exp, ok = st.NextExpiry() })
			if ok {
				due := time.Duration(exp + margin + 1 - ls.now(n.clock))
				if due < next {
					next = max(due, time.Millisecond)
				}
			}
		}
		timer.Reset(next)
	}
}

// await waits for a raft future, but no longer than ctx or the node's
// life: raft does not answer a future whose entry was committed but not yet
// applied when it shuts down, so an unguarded f.Error() can block forever.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopCh:
		return ErrStopped
	}
}

// joinLoop asks the join address to admit this node until it succeeds.
func (n *Node) joinLoop() {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var hdr metadata.MD
		conn, err := n.fwd.conn(n.cfg.Join)
		if err == nil {
			_, err = api.NewClusterServiceClient(conn).Join(ctx, &api.JoinRequest{Id: n.cfg.ID, Addr: n.addr, Nonvoter: n.cfg.Nonvoter}, grpc.Header(&hdr))
		}
		cancel()
		if err == nil {
			n.log.Info("joined cluster", "via", n.cfg.Join, "cluster-id", clusterID(hdr))
			n.writeJoinIdentity(clusterID(hdr))
			return
		}
		if attempt%10 == 0 {
			n.log.Warn("join failed; retrying", "via", n.cfg.Join, "error", err)
		}
		select {
		case <-n.stopCh:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// peerClusterID is the transport's source of the cluster id sent with and
// checked on every Raft RPC (transport.Config.ClusterID).
func (n *Node) peerClusterID() func() string {
	if n.planted(BugClusterIDUnchecked) {
		return nil
	}
	return n.ClusterID
}

// clusterIDHeader carries a node's cluster id in its answer to Join (the
// leader's, for the joining node's identity file) and to Status (for the
// leader's join probe).
const clusterIDHeader = transport.ClusterIDHeader

func clusterID(md metadata.MD) string {
	if v := md.Get(clusterIDHeader); len(v) == 1 {
		return v[0]
	}
	return ""
}

// sendClusterID puts id, if any, in the answer's header (clusterIDHeader).
func sendClusterID(ctx context.Context, id string) {
	if id != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(clusterIDHeader, id))
	}
}

func (n *Node) setClusterID(id string) { n.clusterID.Store(&id) }

// ClusterID returns the cluster id of the node's identity file, empty
// before the node has one (or for a data dir older than identity files).
func (n *Node) ClusterID() string {
	if id := n.clusterID.Load(); id != nil {
		return *id
	}
	return ""
}

// writeJoinIdentity writes the identity of a node admitted by Join once it
// holds Raft state (a term from the leader): an identity over an empty
// raft.db would make the node refuse its own restart.
func (n *Node) writeJoinIdentity(cluster string) {
	for n.raft.CurrentTerm() == 0 {
		select {
		case <-n.stopCh:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	id := Identity{ClusterID: cluster, NodeID: n.cfg.ID, Created: time.Now().UTC()}
	if err := writeIdentity(n.cfg.DataDir, id); err != nil {
		n.log.Error("cannot write the node identity; a wiped data dir will not be caught", "error", err)
		return
	}
	n.setClusterID(cluster)
	n.log.Info("node identity written", "file", filepath.Join(n.cfg.DataDir, IdentityFile), "cluster-id", cluster)
	// The identity guards the data dir from here on; a marker left
	// behind would let a later loss that spared it skip the check.
	_ = os.Remove(filepath.Join(n.cfg.DataDir, JoinMarkerFile))
}

// newLeaseID draws 16 random bytes on the leader: the FSM draws none.
func newLeaseID() []byte {
	id := make([]byte, fsm.LeaseIDLen)
	if _, err := rand.Read(id); err != nil {
		panic("cluster: crypto/rand failed: " + err.Error()) // cannot happen on Linux
	}
	return id
}

// Wait blocks until the node has stopped (Close, or a fatal error).
func (n *Node) Wait() { <-n.stopCh }
