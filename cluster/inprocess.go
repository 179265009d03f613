package cluster

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/transport"
)

// inProcessBuffer is the bytes buffered in each direction of an in-process
// connection (as a socket's buffers would).
const inProcessBuffer = 1 << 20

// inProcess is a gRPC server on an in-memory listener: the lease, cluster
// and health services of a node, for clients in the same process
// (DialInProcess). It has no TLS and no Raft transport: nothing outside
// the process can reach it, and a caller on it has no certificate (with a
// policy it authenticates with a bearer token, client.Config.Token).
type inProcess struct {
	lis *bufconn.Listener
	srv *grpc.Server
}

func newInProcess(opts ...grpc.ServerOption) *inProcess {
	return &inProcess{lis: bufconn.Listen(inProcessBuffer), srv: grpc.NewServer(opts...)}
}

func (p *inProcess) register(n *Node) {
	p.srv.RegisterService(transport.RejectMalformed(&api.LeaseService_ServiceDesc), n.leases)
	p.srv.RegisterService(transport.RejectMalformed(&api.ClusterService_ServiceDesc), n.admin)
	healthpb.RegisterHealthServer(p.srv, n.health)
}

func (p *inProcess) serve(log hclog.Logger) {
	if err := p.srv.Serve(p.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		log.Error("in-process grpc server stopped", "error", err)
	}
}

func (p *inProcess) stop(grace time.Duration) {
	stopped := make(chan struct{})
	go func() { p.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		p.srv.Stop()
		<-stopped
	}
	_ = p.lis.Close()
}

// DialInProcess opens an in-memory connection to this node's lease and
// cluster services: no socket, no TLS, no port limits. It is the dialer of
// the Go client's in-process endpoint:
//
//	client.Config{InProcess: &client.InProcess{Addr: node.Addr(), Dial: node.DialInProcess}}
//
// Calls on it are served like calls on the node's port (a follower
// forwards writes to the leader); with an authorization policy they need a
// bearer token, as a caller without a client certificate does.
func (n *Node) DialInProcess(ctx context.Context) (net.Conn, error) {
	if n.inproc == nil {
		return nil, ErrStopped
	}
	select {
	case <-n.stopCh:
		return nil, ErrStopped
	default:
	}
	return n.inproc.lis.DialContext(ctx)
}

// RegisterServices registers the node's lease and cluster services on an
// application's own gRPC server, so that clients reach the node on the
// application's port. The node's interceptors (panic recovery, the
// corrupt-state guard and, with TLS, the Raft transport guard) run inside
// the application's; authorization (Config.Policy) is checked by the
// services themselves, from the TLS certificate or bearer token of the
// application's server. Peers still need the node's own port
// (Config.Listen or Config.Listener): the Raft transport, forwarded calls
// and joins are served there only, and leader hints name that port. Call
// it after Start and before the application's server serves.
//
// On the application's server, a malformed request is refused with
// InvalidArgument only if the server uses transport.ServerCodec; with
// gRPC's default codec it is refused by gRPC itself (Internal).
func (n *Node) RegisterServices(s grpc.ServiceRegistrar) {
	s.RegisterService(withInterceptors(transport.RejectMalformed(&api.LeaseService_ServiceDesc), n.chain), n.leases)
	s.RegisterService(withInterceptors(transport.RejectMalformed(&api.ClusterService_ServiceDesc), n.chain), n.admin)
}

// interceptors are a node's server interceptors, each chain folded into
// one.
type interceptors struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		for i := len(ints) - 1; i >= 0; i-- {
			next, ic := h, ints[i]
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

func chainStream(ints []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		for i := len(ints) - 1; i >= 0; i-- {
			next, ic := h, ints[i]
			h = func(srv any, ss grpc.ServerStream) error { return ic(srv, ss, info, next) }
		}
		return h(srv, ss)
	}
}

// withInterceptors returns desc with ic run around each of its handlers,
// inside whatever interceptors the serving gRPC server has.
func withInterceptors(desc *grpc.ServiceDesc, ic interceptors) *grpc.ServiceDesc {
	return transport.WithInterceptors(desc, ic.unary, ic.stream)
}
