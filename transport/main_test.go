package transport

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testWriter routes log lines to t.Log until the test's cleanup runs, so a
// late log line from a stopping goroutine cannot fail the test binary.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// newTestLogger returns an hclog.Logger that writes to t.Log.
func newTestLogger(t testing.TB, name string) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: w, Level: hclog.Info})
}

// testNode is a Transport served by its own gRPC server on a loopback port.
type testNode struct {
	tr   *Transport
	srv  *grpc.Server
	addr raft.ServerAddress
	done chan struct{}
	once sync.Once
}

// stop closes the transport and stops the server; it is idempotent.
func (n *testNode) stop() {
	n.once.Do(func() {
		_ = n.tr.Close()
		n.srv.Stop()
		<-n.done
	})
}

// insecureDial is what tests pass as Config.DialOptions.
func insecureDial() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
}

// startNode serves a new Transport on addr ("127.0.0.1:0" for a fresh port).
// mutate, when not nil, adjusts the config before New.
func startNode(t testing.TB, addr string, mutate func(*Config)) *testNode {
	t.Helper()
	lis, err := listen(t, addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	cfg := Config{
		LocalAddr:   raft.ServerAddress(lis.Addr().String()),
		Logger:      newTestLogger(t, "node-"+lis.Addr().String()),
		DialOptions: insecureDial(),
		Timeout:     5 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		_ = lis.Close()
		t.Fatalf("New: %v", err)
	}
	// WaitForHandlers makes Stop wait for running handlers, so no handler
	// goroutine outlives the test.
	srv := grpc.NewServer(grpc.WaitForHandlers(true), grpc.ForceServerCodecV2(ServerCodec()))
	tr.Register(srv)
	n := &testNode{tr: tr, srv: srv, addr: cfg.LocalAddr, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(n.stop)
	return n
}

// listen binds addr, retrying for a while when a just-closed port is still
// held (a restarted node reuses its address).
func listen(t testing.TB, addr string) (net.Listener, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return lis, err
		}
		t.Logf("listen %s: %v; retrying", addr, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor polls cond every few milliseconds until it holds or timeout
// passes, then fails the test with what.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
