package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/internal/loopback"
)

// testCluster runs n in-process nodes with real gRPC on loopback and real
// raft-boltdb stores in t.TempDir().
type testCluster struct {
	t      testing.TB
	nodes  []*Node
	cfgs   []Config
	clocks []*ManualClock
}

// freeAddrs reserves n loopback ports (loopback.FreeAddrs; cluster's own
// tests cannot use testcluster, which imports cluster).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	out, err := loopback.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testLogger routes node logs to t.Log (raft's at warn to keep output short).
func testLogger(t testing.TB, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   name,
		Level:  hclog.Warn,
		Output: testWriter{t},
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newTestCluster(t testing.TB, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	tc := configTestCluster(t, n, tweak)
	for i := range tc.cfgs {
		tc.start(i)
	}
	tc.leader()
	tc.settle()
	return tc
}

// settle waits (5 s at most, without failing) until the leader has
// recorded every node as having served: those entries come right after
// the first election, and a test that counts entries or holds the
// leader's writes expects a quiet leader. A cluster whose nodes cannot
// ask each other's status (a policy over plaintext) records no one.
func (tc *testCluster) settle() {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range tc.nodes {
			if n == nil || !n.IsLeader() {
				continue
			}
			all := true
			n.sm.read(func(st *fsm.State) {
				for _, c := range tc.cfgs {
					all = all && st.HasServed(c.ID)
				}
			})
			if all {
				tc.waitAllApplied(tc.t)
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// configTestCluster is newTestCluster's cluster before any node starts.
func configTestCluster(t testing.TB, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, n)
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprintf("n%d", i+1)] = a
	}
	tc := &testCluster{t: t}
	for i, a := range addrs {
		cfg := DefaultConfig()
		cfg.ID = fmt.Sprintf("n%d", i+1)
		cfg.Listen = a
		cfg.DataDir = t.TempDir()
		cfg.Bootstrap = peers
		cfg.MinTTL = 1500 * time.Millisecond
		cfg.SkewMargin = 200 * time.Millisecond
		cfg.Tick = 200 * time.Millisecond
		clock := NewManualClock()
		cfg.Clock = clock
		cfg.Logger = testLogger(t, cfg.ID)
		cfg.Insecure = true
		if tweak != nil {
			tweak(&cfg)
		}
		if cfg.TLS.Enabled() {
			cfg.Insecure = false
		}
		tc.cfgs = append(tc.cfgs, cfg)
		tc.clocks = append(tc.clocks, clock)
	}
	tc.nodes = make([]*Node, n)
	t.Cleanup(tc.close)
	return tc
}

// joinerConfig is the config of a new node id with an empty data dir that
// joins through node via (no bootstrap list, the system clock).
func (tc *testCluster) joinerConfig(t *testing.T, via int, id string) Config {
	cfg := tc.cfgs[via]
	cfg.ID, cfg.Listen, cfg.DataDir, cfg.Bootstrap, cfg.Join = id, freeAddrs(t, 1)[0], t.TempDir(), nil, tc.cfgs[via].Listen
	cfg.Clock, cfg.Logger = nil, testLogger(t, id)
	return cfg
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	node, err := Start(tc.cfgs[i])
	if err != nil {
		tc.t.Fatalf("start %s: %v", tc.cfgs[i].ID, err)
	}
	tc.nodes[i] = node
}

// stop closes node i (a graceful stop: a leader hands over first).
func (tc *testCluster) stop(i int) {
	if tc.nodes[i] != nil {
		tc.nodes[i].Close()
		tc.nodes[i] = nil
	}
}

func (tc *testCluster) close() {
	for i := range tc.nodes {
		tc.stop(i)
	}
}

// leader waits until exactly one running node leads and is ready.
func (tc *testCluster) leader() (int, *Node) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range tc.nodes {
			if n != nil && n.IsLeader() {
				return i, n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc.t.Fatal("no leader within 15s")
	return -1, nil
}

// follower returns a running node that is not the leader.
func (tc *testCluster) follower() (int, *Node) {
	tc.t.Helper()
	li, _ := tc.leader()
	for i, n := range tc.nodes {
		if n != nil && i != li {
			return i, n
		}
	}
	tc.t.Fatal("no follower")
	return -1, nil
}

// client dials node i's lease service over real gRPC.
func (tc *testCluster) client(i int) api.LeaseServiceClient {
	tc.t.Helper()
	return api.NewLeaseServiceClient(tc.dial(i))
}

// admin dials node i's cluster service over real gRPC.
func (tc *testCluster) admin(i int) api.ClusterServiceClient {
	tc.t.Helper()
	return api.NewClusterServiceClient(tc.dial(i))
}

func (tc *testCluster) dial(i int) *grpc.ClientConn {
	tc.t.Helper()
	conn, err := grpc.NewClient(tc.cfgs[i].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitAllApplied waits until every running node applied the leader's
// applied index; t is the test or subtest that fails if they do not.
func (tc *testCluster) waitAllApplied(t testing.TB) {
	t.Helper()
	_, l := tc.leader()
	want := l.AppliedIndex()
	eventually(t, 10*time.Second, "every node applies the leader's index", func() bool {
		for _, n := range tc.nodes {
			if n != nil && n.AppliedIndex() < want {
				return false
			}
		}
		return true
	})
}

// reportedUnsafe returns the unsafe settings node n's Status lists,
// comma-separated.
func reportedUnsafe(ctx context.Context, t testing.TB, n *Node) string {
	t.Helper()
	st, err := n.admin.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(st.Unsafe, ",")
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testHTTP is the tests' HTTP client: a node that stops answering fails
// the test in 10 s instead of holding it until go test's timeout.
var testHTTP = &http.Client{Timeout: 10 * time.Second}
