package cluster

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
)

// oneNode returns the config of a one-node cluster on a free port.
func embedConfig(t *testing.T, id string) Config {
	cfg := DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = id, freeAddrs(t, 1)[0], t.TempDir()
	cfg.Bootstrap = map[string]string{id: cfg.Listen}
	cfg.Insecure = true
	cfg.Logger = testLogger(t, id)
	return cfg
}

func waitLeader(t *testing.T, n *Node) {
	t.Helper()
	eventually(t, 15*time.Second, n.ID()+" leads", n.IsLeader)
}

// TestCloseOneNodeIsQuiet: the only voter has no one to hand leadership to;
// its stop logs no warning. Before the fix Close asked raft for a transfer
// anyway and logged "leadership transfer before stop failed: cannot find
// peer" at WARN on every stop of an embedded one-node cluster.
func TestCloseOneNodeIsQuiet(t *testing.T) {
	var logs lockedBuffer
	cfg := embedConfig(t, "n1")
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Info, Output: &logs})
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	stopped := logs.String()
	if i := strings.Index(stopped, "n1.node: leading"); i >= 0 { // the election before may warn
		stopped = stopped[i:]
	}
	for _, line := range strings.Split(stopped, "\n") {
		if strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]") {
			t.Errorf("one-node stop logged: %s", line)
		}
	}
}

// TestShutdownHandsLeadershipOver: a leader's Shutdown hands leadership to
// another voter within its deadline.
func TestShutdownHandsLeadershipOver(t *testing.T) {
	var logs lockedBuffer
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.ID, Level: hclog.Info, Output: &logs})
	})
	i, ld := tc.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ld.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	tc.nodes[i] = nil
	if !strings.Contains(logs.String(), "leadership handed over before stop") {
		t.Errorf("no hand-over logged:\n%s", logs.String())
	}
	tc.leader()
}

// TestStartContextEnded: a start whose context has ended stops what it
// began and says why; the port and data dir are free for the next start.
func TestStartContextEnded(t *testing.T) {
	cfg := embedConfig(t, "n1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StartContext(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("start with an ended context: %v, want context.Canceled", err)
	}
	n, err := StartContext(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start after an abandoned one: %v", err)
	}
	defer n.Close()
	waitLeader(t, n)
}

// TestTwoNodesShareARegisterer: two nodes in one process register their
// metrics on the application's registry, told apart by the node label,
// without a panic; a node closed and started again registers anew.
func TestTwoNodesShareARegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c1, c2 := embedConfig(t, "a1"), embedConfig(t, "b1")
	c1.Registerer, c2.Registerer = reg, reg
	n1, err := Start(c1)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := Start(c2)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n1)
	waitLeader(t, n2)
	leaders := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "leasefence_leader" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "node" {
						out[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		return out
	}
	if got := leaders(); got["a1"] != 1 || got["b1"] != 1 {
		t.Fatalf("leasefence_leader on the shared registry: %v, want a1 and b1 at 1", got)
	}
	n1.Close()
	if got := leaders(); len(got) != 1 {
		t.Fatalf("after a1 closed: %v, want b1 only", got)
	}
	n1, err = Start(c1)
	if err != nil {
		t.Fatalf("restart on the same registry: %v", err)
	}
	defer n1.Close()
	defer n2.Close()
	// A second node with a1's id collides on the shared registry: an
	// error of Start, not a panic.
	dup := embedConfig(t, "a1")
	dup.Registerer = reg
	if n, err := Start(dup); err == nil {
		n.Close()
		t.Fatal("a second node a1 on the same registry started")
	}
}

// TestRegisterServicesOnApplicationServer: an application serves the
// node's lease service on its own gRPC server and port, with its own
// interceptor around the node's.
func TestRegisterServicesOnApplicationServer(t *testing.T) {
	n, err := Start(embedConfig(t, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitLeader(t, n)
	var seen sync.Map
	app := grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen.Store(info.FullMethod, true)
		return h(ctx, req)
	}))
	n.RegisterServices(app)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(lis)
	defer app.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := api.NewLeaseServiceClient(conn).Acquire(ctxT(t), acquireReq("app/1", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Lease.GetToken() == 0 {
		t.Fatalf("acquire on the application's port: %v", r)
	}
	if _, ok := seen.Load("/leasefence.v1.LeaseService/Acquire"); !ok {
		t.Error("the application's interceptor did not run")
	}
	// The node's own interceptors run inside: a panic-free refusal of bad
	// input, the same status as on the node's port.
	if _, err := api.NewLeaseServiceClient(conn).Acquire(ctxT(t), &api.AcquireRequest{}); err == nil {
		t.Error("an empty acquire was granted")
	}
}

// TestDialInProcess: the in-process connection serves the lease service
// of a follower, which forwards to the leader, without a socket.
func TestDialInProcess(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	fi, f := tc.follower()
	conn, err := grpc.NewClient("passthrough:///inprocess", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return f.DialInProcess(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := api.NewLeaseServiceClient(conn).Acquire(ctxT(t), acquireReq("inproc/1", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Lease.GetToken() == 0 {
		t.Fatalf("acquire in process on a follower: %v", r)
	}
	tc.stop(fi)
	if _, err := f.DialInProcess(ctxT(t)); !errors.Is(err, ErrStopped) {
		t.Errorf("dial a closed node in process: %v, want ErrStopped", err)
	}
}

// TestStartOnADataDirInUse: a second node on a data dir another node holds
// open says so. Before, Start failed after 5 s with bbolt's bare "timeout".
func TestStartOnADataDirInUse(t *testing.T) {
	cfg := embedConfig(t, "n1")
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	second := cfg
	second.Listen = freeAddrs(t, 1)[0]
	if n2, err := Start(second); err == nil {
		n2.Close()
		t.Fatal("a second node started on a data dir in use")
	} else if !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("second node on a data dir in use: %v", err)
	}
}

// TestStartOnTheApplicationsListener: a node serves peers and clients on a
// listener the application opened, and closes it on Close.
func TestStartOnTheApplicationsListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := embedConfig(t, "n1")
	cfg.Listen, cfg.Listener = "", lis
	cfg.Bootstrap = map[string]string{"n1": lis.Addr().String()}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n.Addr() != lis.Addr().String() {
		t.Fatalf("node serves %s, the listener is %s", n.Addr(), lis.Addr())
	}
	waitLeader(t, n)
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := api.NewLeaseServiceClient(conn).Acquire(ctxT(t), acquireReq("lis/1", 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		c.Close()
		t.Error("the listener still accepts after Close")
	}
}

// TestStartContextDeadlineOnADataDirInUse: the wait for a data dir another
// node holds open ends with the start's deadline, not bbolt's own 5 s
// timeout. Before, the error did not wrap context.DeadlineExceeded (the
// start waited the full 5 s and said "timeout").
func TestStartContextDeadlineOnADataDirInUse(t *testing.T) {
	cfg := embedConfig(t, "n1")
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	second := cfg
	second.Listen = freeAddrs(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if n2, err := StartContext(ctx, second); err == nil {
		n2.Close()
		t.Fatal("a second node started on a data dir in use")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start with a deadline on a data dir in use: %v, want context.DeadlineExceeded", err)
	}
}

// TestStartFailingHalfWayLeavesNothingOpen: a start that fails after it
// opened the data dir, bound the port, built the servers and the transport
// or started raft closes all of it: no goroutine of it stays, and the next
// start on the same data dir and port succeeds at once (a data dir lock
// left behind would make it wait and fail "in use", a port left bound
// would fail to listen).
func TestStartFailingHalfWayLeavesNothingOpen(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name    string
		breakIt func(*Config)
		want    string
	}{
		// Data dir and port open, nothing built on them yet.
		{"after listen", func(c *Config) { c.Advertise = busy.Addr().String() }, "bootstrap list gives"},
		// Servers, in-process server and transport built, raft not started.
		{"after the servers", func(c *Config) { c.RestoreFrom, c.RestoreEpoch = filepath.Join(c.DataDir, "no-such-backup"), EpochBase }, "no-such-backup"},
		// Raft running and bootstrapped, identity written.
		{"after raft", func(c *Config) { c.MetricsListen = busy.Addr().String() }, "metrics listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := embedConfig(t, "n1")
			bad := cfg
			tc.breakIt(&bad)
			ignore := goleak.IgnoreCurrent()
			if n, err := Start(bad); err == nil {
				n.Close()
				t.Fatal("the broken start succeeded")
			} else if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start failed with %v, want %q", err, tc.want)
			}
			if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*deferError).Error")); err != nil {
				t.Errorf("goroutines of the failed start left running: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // under the data dir lock wait
			defer cancel()
			n, err := StartContext(ctx, cfg)
			if err != nil {
				t.Fatalf("start after the failed one: %v", err)
			}
			defer n.Close()
			waitLeader(t, n)
		})
	}
}
