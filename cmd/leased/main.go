// Command leased runs one leasefence node.
//
//	leased --id n1 --listen 127.0.0.1:7001 --data-dir data/n1 \
//	       --bootstrap n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003
//
// Every flag can also be set through an environment variable named
// LEASEFENCE_ plus the flag in upper case with '-' as '_' (for example
// LEASEFENCE_DATA_DIR); a flag on the command line wins.
//
// A node speaks mutual TLS or, with --insecure (local development only),
// plaintext; it refuses to start with neither:
//
//	leased ... --tls-cert certs/n1.crt --tls-key certs/n1.key --tls-ca certs/ca.crt
//
// "leased health" checks a node's gRPC health service (exit 0 when
// SERVING), for container health checks; "leased --version" prints the
// build.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/buildinfo"
	"github.com/leasefence/leasefence/internal/flagenv"
	"github.com/leasefence/leasefence/internal/memlimit"
	"github.com/leasefence/leasefence/transport"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "dump-log" {
		return dumpLog(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "health" {
		return health(args[1:], stdout, stderr)
	}
	cfg, err := parse(args, stdout, stderr)
	if err == flag.ErrHelp || err == errPrinted {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "leased:", err)
		return 2
	}
	knobs, bugs, err := plantedKnobs()
	if err != nil {
		fmt.Fprintln(stderr, "leased:", err)
		return 2
	}
	if len(bugs) > 0 {
		fmt.Fprintf(stderr, "leased: PLANTED BUGS ON: %s (a test build for the fault harness; never in production)\n", strings.Join(bugs, ","))
	}
	cfg.Testing = knobs
	if cfg.memory.Bytes > 0 {
		debug.SetMemoryLimit(cfg.memory.Bytes)
	}
	cfg.Logger.Info("memory limit", "limit", cfg.memory.String())
	node, err := cluster.Start(cfg.Config)
	if err != nil {
		fmt.Fprintln(stderr, "leased:", err)
		return 1
	}
	fmt.Fprintf(stdout, "leased %s serving on %s\n", node.ID(), node.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		cfg.Logger.Info("stopping", "signal", s.String())
	case <-nodeFailed(node):
	}
	if err := node.Close(); err != nil {
		fmt.Fprintln(stderr, "leased: stop:", err)
	}
	if err := node.Err(); err != nil {
		fmt.Fprintln(stderr, "leased:", err)
		return 1
	}
	return 0
}

// dumpLog is the hidden "leased dump-log --data-dir DIR" subcommand: the
// applied commands of a stopped node's log, boltdb or wal, as JSON lines
// (cluster.DumpLog, which leaves the data dir unchanged), for the jepsen
// harness.
func dumpLog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leased dump-log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data-dir", "", "data dir of a stopped node (either --log-store; read, never changed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "leased dump-log: --data-dir DIR, nothing else")
		return 2
	}
	if err := cluster.DumpLog(*dir, stdout); err != nil {
		fmt.Fprintln(stderr, "leased:", err)
		return 1
	}
	return 0
}

// autoBool is a boolean flag that may be left to a default decided later
// ("auto").
type autoBool struct {
	set, val bool
}

func (b *autoBool) IsBoolFlag() bool { return true }

func (b *autoBool) String() string {
	if b == nil || !b.set {
		return "auto"
	}
	return strconv.FormatBool(b.val)
}

func (b *autoBool) Set(s string) error {
	if s == "auto" {
		*b = autoBool{}
		return nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true, false or auto", s)
	}
	*b = autoBool{set: true, val: v}
	return nil
}

// or returns the value given, else def.
func (b autoBool) or(def bool) bool {
	if b.set {
		return b.val
	}
	return def
}

// nodeFailed returns a channel closed when the node stopped itself after a
// fatal error.
func nodeFailed(n *cluster.Node) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		n.Wait()
		close(ch)
	}()
	return ch
}

// errPrinted ends a run that only printed (--print-config, --version).
var errPrinted = errors.New("printed")

// settings are the node's configuration and the process-wide ones that
// are not the node's business.
type settings struct {
	cluster.Config
	memory memlimit.Choice // the Go runtime's soft memory limit
}

func parse(args []string, stdout, stderr io.Writer) (settings, error) {
	cfg := cluster.DefaultConfig()
	fs := flag.NewFlagSet("leased", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs, stderr) }
	var bootstrap, logLevel string
	var logJSON bool
	fs.StringVar(&cfg.ID, "id", "", "node id, stable for the life of the data dir (required)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "host:port to serve peers and clients on")
	fs.StringVar(&cfg.Advertise, "advertise", "", "address others reach this node at (default: the listen address)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the raft log and snapshots (required)")
	fs.StringVar(&cfg.LogStore, "log-store", cfg.LogStore, "where the raft log lives: boltdb (raft.db) or wal (raft-wal segments in DATA_DIR/wal); empty: the data dir's own, wal for a new one. Fixed at the data dir's first start: a node started with the other one named refuses to start")
	fs.StringVar(&bootstrap, "bootstrap", "", "founding members id=host:port,... (first start only; the same on every founding node)")
	fs.StringVar(&cfg.Join, "join", "", "address of a running member to join through (first start only)")
	fs.BoolVar(&cfg.Nonvoter, "nonvoter", false, "join as a non-voting member")
	fs.StringVar(&cfg.RestoreFrom, "restore", "", "start a new cluster from this backup file (first start only, with --bootstrap; the same file on every founding node)")
	fs.Uint64Var(&cfg.BumpTokens, "bump-tokens", cluster.DefaultBumpTokens, "on --restore, raise the cluster's token floor to the backup's highest token plus this much (at most 2^32; the restore epoch's line may raise it further): every scope's next token, a scope the backup never saw included, is above it (0 needs --allow-zero-bump)")
	fs.BoolVar(&cfg.AllowZeroBump, "allow-zero-bump", false, "allow --bump-tokens 0 (new tokens may then repeat tokens issued after the backup)")
	fs.Uint64Var(&cfg.RestoreEpoch, "restore-epoch", 0, "required with --restore on a first start: the Unix time in seconds when this restore began, read once (EPOCH=$(date +%s)) and given to every founding node, later than every earlier restore's; it makes this restore a cluster of its own whose tokens beat those of every earlier restore, of this backup or another")
	fs.DurationVar(&cfg.MinTTL, "min-ttl", cfg.MinTTL, "shortest lease ttl accepted")
	fs.DurationVar(&cfg.MaxTTL, "max-ttl", cfg.MaxTTL, "longest lease ttl accepted")
	fs.DurationVar(&cfg.SkewMargin, "skew-margin", cfg.SkewMargin, "safety margin added after expiry before a resource is granted again")
	fs.Float64Var(&cfg.Drift, "drift", cfg.Drift, "assumed bound on clock rate drift")
	fs.DurationVar(&cfg.Tick, "tick", cfg.Tick, "longest interval between the leader's time ticks")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "raft heartbeat timeout")
	fs.DurationVar(&cfg.ElectionTimeout, "election-timeout", cfg.ElectionTimeout, "raft election timeout")
	fs.DurationVar(&cfg.LeaderLeaseTimeout, "leader-lease-timeout", cfg.LeaderLeaseTimeout, "raft leader lease timeout")
	fs.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", cfg.SnapshotInterval, "how often raft checks whether to snapshot")
	fs.Uint64Var(&cfg.SnapshotThreshold, "snapshot-threshold", cfg.SnapshotThreshold, "log entries since the last snapshot that trigger a new one: the least, raised up to --snapshot-threshold-max while the state is large, so that the log between snapshots stays near half a snapshot's size")
	fs.Uint64Var(&cfg.SnapshotThresholdMax, "snapshot-threshold-max", 0, "the most --snapshot-threshold is raised to while the state is large (0: 64x --snapshot-threshold; equal to it: never raised)")
	fs.Uint64Var(&cfg.TrailingLogs, "trailing-logs", cfg.TrailingLogs, "log entries kept after a snapshot")
	fs.Uint64Var(&cfg.StateCheckEvery, "state-check-every", cfg.StateCheckEvery, "hash the state at every multiple of this many log indexes, for the replicas to compare (docs/OPERATIONS.md, \"Corruption\")")
	fs.DurationVar(&cfg.StateCheckPoll, "state-check-poll", cfg.StateCheckPoll, "how often a node compares its state hashes with the other voters'")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "host:port for HTTP /metrics (Prometheus), /healthz and the status page (--status-page); empty: off")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve /debug/pprof/ on the metrics address (exposes internals)")
	fs.StringVar(&cfg.PolicyFile, "policy", "", "JSON authorization policy (identities, tokens, prefixes, admin; see docs/SECURITY.md); empty: everything allowed")
	fs.IntVar(&cfg.MaxWaitersPerResource, "max-waiters-per-resource", cfg.MaxWaitersPerResource, "callers that may queue on one resource (Acquire with wait)")
	fs.IntVar(&cfg.MaxWatchersPerClient, "max-watchers-per-client", cfg.MaxWatchersPerClient, "open watch streams per identity (per connection without a policy)")
	fs.DurationVar(&cfg.RefusalKeep, "refusal-keep", cfg.RefusalKeep, "how long a refused Acquire's request id is remembered, so a late copy is refused again (>= 30s; must cover a client's retries of one request id)")
	fs.IntVar(&cfg.MaxRefusals, "max-refusals", cfg.MaxRefusals, "refused request ids remembered at most; past it the oldest are forgotten first (about 110 B of heap and of snapshot each)")
	fs.IntVar(&cfg.MaxPending, "max-pending", cfg.MaxPending, "renewals and releases the leader admits and has not answered yet; past it they are refused with ResourceExhausted and a retry hint (renewals of leases with under a third of their ttl left have another budget of this size)")
	fs.IntVar(&cfg.MaxPendingGrants, "max-pending-grants", cfg.MaxPendingGrants, "the same bound for new grants, counted apart and smaller: grants are refused (ResourceExhausted, retry hint) while renewals still go through; at most --max-pending")
	fs.IntVar(&cfg.MaxLeasesPerIdentity, "max-leases-per-identity", cfg.MaxLeasesPerIdentity, "live leases one identity may hold (with --policy)")
	// Connection and message limits on the gRPC port (cluster.Config.Limits).
	var maxStreams uint
	fs.IntVar(&cfg.Limits.MaxConnections, "max-connections", cfg.Limits.MaxConnections, "open client connections (and connections in their TLS handshake) on the gRPC port; peers are not counted. Past it, with TLS, 64 more may run their handshake (peers get in), then the one longest in its handshake is closed; without TLS the new one is closed")
	fs.DurationVar(&cfg.Limits.HandshakeTimeout, "handshake-timeout", cfg.Limits.HandshakeTimeout, "time a new connection has for its TLS handshake and its HTTP/2 preface")
	fs.DurationVar(&cfg.Limits.IdleTimeout, "idle-timeout", cfg.Limits.IdleTimeout, "close a connection without calls for this long (GOAWAY; clients reconnect)")
	fs.UintVar(&maxStreams, "max-streams-per-connection", uint(cfg.Limits.MaxStreamsPerConnection), "concurrent calls on one client connection (with TLS; peers are not bounded)")
	fs.IntVar(&cfg.Limits.MaxClientMessage, "max-client-message", cfg.Limits.MaxClientMessage, "largest message in bytes a client may send (with TLS; larger: ResourceExhausted)")
	fs.IntVar(&cfg.Limits.MaxPeerMessage, "max-peer-message", cfg.Limits.MaxPeerMessage, "largest message in bytes a peer may send (Raft AppendEntries, snapshot chunks); without TLS the limit for every caller")
	var statusPage autoBool
	fs.Var(&statusPage, "status-page", "serve a read-only HTML status page (/ and /status) on --metrics-listen: true, false or auto (on with --insecure, off with TLS); with --policy only an administrator's bearer token opens it")
	var reflection autoBool
	fs.Var(&reflection, "grpc-reflection", "serve gRPC server reflection (grpcurl list/describe) on the gRPC port: true, false or auto (on with --insecure, off with TLS); with --policy only administrators may call it")
	var insecure bool
	fs.BoolVar(&insecure, "insecure", false, "serve plaintext gRPC without TLS: local development only (anyone who reaches the port can take every lease and call the Raft transport: TimeoutNow, AppendEntries)")
	fs.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "PEM certificate of this node (with the peer identity); with --tls-key and --tls-ca turns on mutual TLS")
	fs.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&cfg.TLS.CAFile, "tls-ca", "", "PEM CA certificate(s) that sign node and client certificates; callers must present one")
	fs.StringVar(&cfg.PeerIdentity, "peer-identity", transport.DefaultPeerIdentity, "URI SAN that marks node certificates; only they may call the Raft transport (with TLS)")
	fs.StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	var memoryLimit string
	fs.StringVar(&memoryLimit, "memory-limit", "auto", "soft limit on the Go runtime's memory (512MiB, 1GiB, ...): the collector works harder near it; auto: 90% of the cgroup's memory limit when there is one, unless GOMEMLIMIT is set; off: none")
	// Environment first, so that flags given on the command line win.
	var version bool
	fs.BoolVar(&version, "version", false, "print leased's version, the commit it was built from and its Go version, and exit")
	var configFile string
	var printConfig bool
	fs.StringVar(&configFile, "config", "", "config file of `name = value` lines (flag names); env and flags win over it")
	fs.BoolVar(&printConfig, "print-config", false, "print the effective configuration as a config file and exit")
	// Precedence: command line > LEASEFENCE_* environment > config file >
	// defaults.
	// The unsafe switches are taken from the command line only: a setting
	// in the environment or a config file is refused, not applied (it would
	// be easy to leave behind and invisible in the command line).
	if err := refuseUnsafeInEnv(os.Environ()); err != nil {
		return settings{Config: cfg}, err
	}
	if path := flagenv.Lookup(args, "config"); path != "" || os.Getenv("LEASEFENCE_CONFIG") != "" {
		if path == "" {
			path = os.Getenv("LEASEFENCE_CONFIG")
		}
		if err := refuseUnsafeInFile(path); err != nil {
			return settings{Config: cfg}, err
		}
		if err := flagenv.ApplyFile(fs, path); err != nil {
			return settings{Config: cfg}, err
		}
	}
	if err := flagenv.Apply(fs, "LEASEFENCE_"); err != nil {
		return settings{Config: cfg}, err
	}
	// Hidden and command line only (defined after the environment and the
	// config file were applied, left out of --help and --print-config):
	// fault injection for the jepsen harness. Status lists each as unsafe
	// and the node logs a warning for each at start.
	fs.StringVar(&cfg.Unsafe.FaultClockFile, flagFaultClock, "", "UNSAFE, fault injection only: take this node's clock rate and wall offset from this JSON control file")
	var peerRoutes string
	fs.StringVar(&peerRoutes, unsafePeerRouteFlag, "", "UNSAFE, fault injection only: ADDR=VIA,... dial VIA whenever this node dials peer ADDR (reported in status as unsafe peer-route)")
	if err := fs.Parse(args); err != nil {
		return settings{Config: cfg}, err
	}
	if version {
		fmt.Fprint(stdout, buildinfo.Read().Text())
		return settings{Config: cfg}, errPrinted
	}
	if printConfig {
		// A config file cannot carry the unsafe switches.
		flagenv.Print(stdout, fs, "config", "print-config", "version", flagFaultClock, unsafePeerRouteFlag)
		return settings{Config: cfg}, errPrinted
	}
	if fs.NArg() > 0 {
		return settings{Config: cfg}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if maxStreams > math.MaxUint32 {
		return settings{Config: cfg}, fmt.Errorf("--max-streams-per-connection %d is above %d", maxStreams, uint32(math.MaxUint32))
	}
	cfg.Limits.MaxStreamsPerConnection = uint32(maxStreams)
	peers, err := cluster.ParsePeers(bootstrap)
	if err != nil {
		return settings{Config: cfg}, err
	}
	if len(peers) > 0 {
		cfg.Bootstrap = peers
	}
	if cfg.Unsafe.PeerRoutes, err = parsePeerRoutes(peerRoutes); err != nil {
		return settings{Config: cfg}, err
	}
	level := hclog.LevelFromString(logLevel)
	if level == hclog.NoLevel {
		return settings{Config: cfg}, fmt.Errorf("unknown log level %q", logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "leased", Level: level, JSONFormat: logJSON, Output: stderr})
	// Not a Config rule: in a Config a zero BumpTokens means the default,
	// while here 0 was typed on the command line and must not silently
	// become 2^32. Every rule of the Config itself is cfg.Validate's.
	if cfg.BumpTokens == 0 && !cfg.AllowZeroBump {
		return settings{Config: cfg}, fmt.Errorf("--bump-tokens 0 needs --allow-zero-bump: without a bump, new tokens may repeat tokens resources have already accepted")
	}
	cfg.Insecure = insecure // Validate refuses neither TLS nor --insecure, and both
	cfg.GRPCReflection = reflection.or(insecure)
	cfg.StatusPage = statusPage.or(insecure)
	mem, err := memlimit.Choose(memoryLimit, os.Getenv("GOMEMLIMIT"), "/")
	if err != nil {
		return settings{Config: cfg}, err
	}
	return settings{Config: cfg, memory: mem}, cfg.Validate()
}

// flagFaultClock is the hidden unsafe flag of the fault-injection clock
// (cluster.Config.Unsafe.FaultClockFile; see jepsen/README.md).
const flagFaultClock = "unsafe-fault-clock"

// unsafePeerRouteFlag is the hidden unsafe flag of peer routes
// (cluster.Config.Unsafe.PeerRoutes; jepsen's proxy mode).
const unsafePeerRouteFlag = "unsafe-peer-route"

// unsafePrefix starts the name of every unsafe switch: fault injection
// only, hidden from --help and --print-config, command line only.
const unsafePrefix = "unsafe-"

// refuseUnsafeInEnv refuses a LEASEFENCE_UNSAFE_* variable with a value.
func refuseUnsafeInEnv(environ []string) error {
	envPrefix := flagenv.Name("LEASEFENCE_", unsafePrefix)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && value != "" {
			return fmt.Errorf("%s is set: the unsafe switches (fault injection only) are taken from the command line only (--%s), never from the environment; unset it",
				name, strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "LEASEFENCE_"), "_", "-")))
		}
	}
	return nil
}

// refuseUnsafeInFile refuses a config file that sets an unsafe switch.
func refuseUnsafeInFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(data), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), "=")
		if name = strings.TrimSpace(name); strings.HasPrefix(name, unsafePrefix) {
			return fmt.Errorf("%s:%d: %s: the unsafe switches (fault injection only) are taken from the command line only (--%s), never from a config file",
				path, i+1, name, name)
		}
	}
	return nil
}

// usage prints the flags but the hidden unsafe ones.
func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage of leased:\n")
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, unsafePrefix) {
			return
		}
		name, help := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s %s\n    \t%s", f.Name, name, help)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %v)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// parsePeerRoutes parses --unsafe-peer-route: ADDR=VIA pairs, both
// host:port, each ADDR at most once. Empty means no routes (nil).
func parsePeerRoutes(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		from, via, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("--%s: %q is not ADDR=VIA", unsafePeerRouteFlag, part)
		}
		for _, a := range []string{from, via} {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return nil, fmt.Errorf("--%s: %q in %q is not host:port", unsafePeerRouteFlag, a, part)
			}
		}
		if _, dup := out[from]; dup {
			return nil, fmt.Errorf("--%s: %s routed twice", unsafePeerRouteFlag, from)
		}
		out[from] = via
	}
	return out, nil
}
