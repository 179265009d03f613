package ctl

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

// fake is an in-process leasefence node: it implements both services on a
// real loopback gRPC listener. Each handler is optional (nil answers
// Unimplemented); every request is recorded.
type fake struct {
	api.UnimplementedLeaseServiceServer
	api.UnimplementedClusterServiceServer

	addr string

	onAcquire  func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error)
	onRenew    func(context.Context, *api.RenewRequest) (*api.RenewResponse, error)
	onRelease  func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error)
	onGet      func(context.Context, *api.GetRequest) (*api.GetResponse, error)
	onWatch    func(*api.WatchRequest, grpc.ServerStreamingServer[api.WatchEvent]) error
	onStatus   func(context.Context, *api.StatusRequest) (*api.StatusResponse, error)
	onJoin     func(context.Context, *api.JoinRequest) (*api.JoinResponse, error)
	onRemove   func(context.Context, *api.RemoveRequest) (*api.RemoveResponse, error)
	onTransfer func(context.Context, *api.TransferLeadershipRequest) (*api.TransferLeadershipResponse, error)
	onSnapshot func(*api.SnapshotRequest, grpc.ServerStreamingServer[api.SnapshotChunk]) error

	mu    sync.Mutex
	calls []call
}

// call is one request a fake received.
type call struct {
	method string
	req    proto.Message
}

func (f *fake) record(method string, req proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{method: method, req: proto.Clone(req)})
}

// requests returns the requests received for method, in order.
func (f *fake) requests(method string) []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.Message
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c.req)
		}
	}
	return out
}

func (f *fake) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func unimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "fake: %s not set", method)
}

func (f *fake) Acquire(ctx context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
	f.record("Acquire", r)
	if f.onAcquire == nil {
		return nil, unimplemented("Acquire")
	}
	return f.onAcquire(ctx, r)
}

func (f *fake) Renew(ctx context.Context, r *api.RenewRequest) (*api.RenewResponse, error) {
	f.record("Renew", r)
	if f.onRenew == nil {
		return nil, unimplemented("Renew")
	}
	return f.onRenew(ctx, r)
}

func (f *fake) Release(ctx context.Context, r *api.ReleaseRequest) (*api.ReleaseResponse, error) {
	f.record("Release", r)
	if f.onRelease == nil {
		return nil, unimplemented("Release")
	}
	return f.onRelease(ctx, r)
}

func (f *fake) Get(ctx context.Context, r *api.GetRequest) (*api.GetResponse, error) {
	f.record("Get", r)
	if f.onGet == nil {
		return nil, unimplemented("Get")
	}
	return f.onGet(ctx, r)
}

func (f *fake) Watch(r *api.WatchRequest, s grpc.ServerStreamingServer[api.WatchEvent]) error {
	f.record("Watch", r)
	if f.onWatch == nil {
		return unimplemented("Watch")
	}
	return f.onWatch(r, s)
}

func (f *fake) Status(ctx context.Context, r *api.StatusRequest) (*api.StatusResponse, error) {
	f.record("Status", r)
	if f.onStatus == nil {
		return nil, unimplemented("Status")
	}
	return f.onStatus(ctx, r)
}

func (f *fake) Join(ctx context.Context, r *api.JoinRequest) (*api.JoinResponse, error) {
	f.record("Join", r)
	if f.onJoin == nil {
		return nil, unimplemented("Join")
	}
	return f.onJoin(ctx, r)
}

func (f *fake) Remove(ctx context.Context, r *api.RemoveRequest) (*api.RemoveResponse, error) {
	f.record("Remove", r)
	if f.onRemove == nil {
		return nil, unimplemented("Remove")
	}
	return f.onRemove(ctx, r)
}

func (f *fake) TransferLeadership(ctx context.Context, r *api.TransferLeadershipRequest) (*api.TransferLeadershipResponse, error) {
	f.record("TransferLeadership", r)
	if f.onTransfer == nil {
		return nil, unimplemented("TransferLeadership")
	}
	return f.onTransfer(ctx, r)
}

func (f *fake) Snapshot(r *api.SnapshotRequest, s grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	f.record("Snapshot", r)
	if f.onSnapshot == nil {
		return unimplemented("Snapshot")
	}
	return f.onSnapshot(r, s)
}

// start serves f on a fresh loopback port until the test ends, and returns f.
func start(t *testing.T, f *fake) *fake {
	t.Helper()
	return startWith(t, f)
}

// startWith is start with server options (TLS credentials).
func startWith(t *testing.T, f *fake, opts ...grpc.ServerOption) *fake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	api.RegisterLeaseServiceServer(srv, f)
	api.RegisterClusterServiceServer(srv, f)
	f.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return f
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// notLeader is the error of a follower that cannot forward: Unavailable
// with a NotLeader detail naming the leader.
func notLeader(t *testing.T, leaderAddr string) error {
	t.Helper()
	st, err := status.New(codes.Unavailable, "not the leader").
		WithDetails(&api.NotLeader{LeaderId: "n2", LeaderAddr: leaderAddr})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func withDetail(t *testing.T, c codes.Code, msg string, d protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(d)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

var testLeaseID = []byte{0x3f, 0x2a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0xee}

const testLeaseHex = "3f2a0102030405060708090a0b0c0dee"

// testLeaseB64 is testLeaseID as leasectl and grpcurl print it.
const testLeaseB64 = "PyoBAgMEBQYHCAkKCwwN7g=="

func testLease(resource string) *api.Lease {
	return &api.Lease{
		Id:          testLeaseID,
		Resource:    resource,
		Scope:       resource,
		Token:       7,
		Holder:      "worker-a",
		Ttl:         durationpb.New(10 * time.Second),
		GrantedAtNs: 1_000_000_000,
		ExpiresAtNs: 11_000_000_000,
	}
}

// granting answers every Acquire with a lease on the requested resource.
func granting(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
	l := testLease(r.GetResource())
	if r.GetScope() != "" {
		l.Scope = r.GetScope()
	}
	l.Holder = r.GetHolder()
	l.Ttl = r.GetTtl()
	return &api.AcquireResponse{Lease: l, TtlRemaining: durationpb.New(9800 * time.Millisecond)}, nil
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one leasectl run produced.
type result struct {
	code           int
	stdout, stderr string
}

// newTestApp is an app with no environment, a fixed host name and quick
// retries (the client gives up after 300ms of failures).
func newTestApp(stdout, stderr *syncBuffer) *app {
	a := newApp(strings.NewReader(""), stdout, stderr)
	a.getenv = func(string) string { return "" }
	a.hostname = func() (string, error) { return "testhost", nil }
	a.retryFor = 300 * time.Millisecond
	a.connectTimeout = time.Second
	return a
}

// runCtl runs leasectl with args to completion.
func runCtl(t *testing.T, args ...string) result {
	t.Helper()
	return runCtlCtx(context.Background(), args...)
}

func runCtlCtx(ctx context.Context, args ...string) result {
	var stdout, stderr syncBuffer
	code := newTestApp(&stdout, &stderr).run(ctx, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}
