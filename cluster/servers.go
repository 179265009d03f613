package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/transport"
)

// servers are a node's gRPC servers behind its one port (transport.Port).
//
// With mutual TLS the port completes each handshake and hands a connection
// whose verified certificate carries the peer identity to peer (Raft
// transport, forwarded calls, joins: the peer message limit, unbounded
// streams) and every other one to client (the client message limit, bounded
// streams per connection). Both register every service: the Raft transport
// on client stays guarded by transport.PeerInterceptors (PermissionDenied),
// and the client services on peer serve calls a follower forwards. A peer's
// heartbeats never share a connection or a server with client calls.
//
// Without TLS nothing tells a peer from a client: peer serves everyone (with
// the peer message limit, the connection cap and the timeouts) and client
// is nil.
type servers struct {
	port   *transport.Port
	peer   *grpc.Server
	client *grpc.Server // nil without TLS
	log    hclog.Logger
}

// newServers builds the servers on lis with the node's limits. srvTLS is
// the TLS server configuration (nil: plaintext); opts (interceptors) and
// the stream workers of a server on the network go to both servers.
func newServers(lis net.Listener, srvTLS *tls.Config, cfg Config, log hclog.Logger, opts ...grpc.ServerOption) *servers {
	l := cfg.Limits.WithDefaults()
	s := &servers{log: log}
	s.port = transport.NewPort(lis, transport.PortConfig{
		TLS:              srvTLS,
		PeerIdentity:     cfg.PeerIdentity,
		MaxConnections:   l.MaxConnections,
		HandshakeTimeout: l.HandshakeTimeout,
		Logger:           log,
	})
	opts = append(opts, transport.StreamWorkers())
	peerOpts := append(l.PeerServerOptions(), opts...)
	if srvTLS == nil {
		s.peer = grpc.NewServer(peerOpts...)
		log.Warn("plaintext (--insecure): peers and clients cannot be told apart and share one gRPC server; "+
			"every caller may send messages up to the peer limit and call the Raft transport",
			"max-message", l.MaxPeerMessage, "max-connections", l.MaxConnections)
	} else {
		creds := grpc.Creds(transport.HandshakenTLS())
		s.peer = grpc.NewServer(append(peerOpts, creds)...)
		s.client = grpc.NewServer(append(append(l.ClientServerOptions(), opts...), creds)...)
	}
	warnFileLimit(log, l.MaxConnections)
	return s
}

// register calls reg with every server, before they serve.
func (s *servers) register(reg func(grpc.ServiceRegistrar)) {
	reg(s.peer)
	if s.client != nil {
		reg(s.client)
	}
}

// serve serves until stop; it returns when every server has returned.
func (s *servers) serve() {
	var wg sync.WaitGroup
	run := func(name string, srv *grpc.Server, lis net.Listener) {
		defer wg.Done()
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("grpc server stopped", "server", name, "error", err)
		}
	}
	if s.client == nil {
		wg.Add(1)
		go run("all", s.peer, s.port.Clients())
	} else {
		wg.Add(2)
		go run("peer", s.peer, s.port.Peers())
		go run("client", s.client, s.port.Clients())
	}
	wg.Wait()
}

// stop stops the servers gracefully, forcibly after grace, then closes the
// port (and with it connections still in their handshake).
func (s *servers) stop(grace time.Duration) {
	var wg sync.WaitGroup
	for _, srv := range []*grpc.Server{s.peer, s.client} {
		if srv == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopped := make(chan struct{})
			go func() { srv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(grace):
				srv.Stop()
				<-stopped
			}
		}()
	}
	wg.Wait()
	_ = s.port.Close()
}

// fileReserve is the file descriptors kept for everything but client
// connections (raft.db, snapshots, peers, the metrics server).
const fileReserve = 256

// warnFileLimit logs when max connections could exhaust the process's file
// descriptors: the cap would then not protect snapshots and peers.
func warnFileLimit(log hclog.Logger, maxConns int) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	if rl.Cur != ^uint64(0) && uint64(maxConns)+fileReserve > rl.Cur {
		log.Warn("max connections leave too few file descriptors for the rest of the node; lower --max-connections or raise the open-files limit",
			"max-connections", maxConns, "open-files-limit", rl.Cur, "reserve", fileReserve)
	}
}

// registerPortMetrics adds the port's connection gauges and counters to
// reg. They read 0 until the node's servers exist.
func registerPortMetrics(reg prometheus.Registerer, n *Node) {
	stats := func() transport.PortStats {
		if n.server == nil {
			return transport.PortStats{}
		}
		return n.server.port.Stats()
	}
	for _, g := range []struct {
		kind string
		f    func(transport.PortStats) int
	}{
		{"client", func(s transport.PortStats) int { return s.Clients - (s.Handshaking - s.Reserved) }},
		{"handshaking", func(s transport.PortStats) int { return s.Handshaking }},
		{"peer", func(s transport.PortStats) int { return s.Peers }},
	} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "leasefence", Name: "connections_open",
			Help:        "Open connections on the gRPC port by kind: client (established), handshaking (TLS handshake under way, in the cap or the reserve past it), peer (verified peer certificate, not counted against --max-connections).",
			ConstLabels: prometheus.Labels{"kind": g.kind},
		}, func() float64 { return float64(g.f(stats())) }))
	}
	for _, c := range []struct {
		name, help string
		f          func(transport.PortStats) uint64
	}{
		{"connections_refused_total", "Connections closed because established connections held every --max-connections slot (at accept, or a client after its handshake on the reserve).", func(s transport.PortStats) uint64 { return s.Refused }},
		{"connections_evicted_total", "Connections closed in their TLS handshake to make room for a new one at --max-connections.", func(s transport.PortStats) uint64 { return s.Evicted }},
		{"tls_handshake_failures_total", "TLS handshakes on the gRPC port that failed or exceeded --handshake-timeout.", func(s transport.PortStats) uint64 { return s.HandshakeFailures }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "leasefence", Name: c.name, Help: c.help},
			func() float64 { return float64(c.f(stats())) }))
	}
}

// publicServices are the services server reflection describes: the API a
// client in any language calls, the health service and reflection itself.
// The Raft transport is left out: it is the nodes' business, not a client's.
var publicServices = map[string]bool{
	api.LeaseService_ServiceDesc.ServiceName:                   true,
	api.ClusterService_ServiceDesc.ServiceName:                 true,
	healthpb.Health_ServiceDesc.ServiceName:                    true,
	reflectionv1.ServerReflection_ServiceDesc.ServiceName:      true,
	reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: true,
}

// publicInfo lists the public services of one gRPC server for reflection.
type publicInfo struct{ srv *grpc.Server }

func (p publicInfo) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := map[string]grpc.ServiceInfo{}
	for name, info := range p.srv.GetServiceInfo() {
		if publicServices[name] {
			out[name] = info
		}
	}
	return out
}

// registerReflection serves gRPC server reflection (v1 and the v1alpha
// that older grpcurl builds ask for) on s, so that grpcurl and other
// generic clients list and describe the API without the .proto files.
//
// Reflection only describes the public services (publicServices); with a
// policy only an administrator may call it (PermissionDenied otherwise),
// without one anyone who may connect (with TLS: holders of a certificate
// the CA signed). Config.GRPCReflection turns it on.
func (n *Node) registerReflection(s grpc.ServiceRegistrar) {
	srv, ok := s.(*grpc.Server)
	if !ok {
		return
	}
	inner := reflection.NewServerV1(reflection.ServerOptions{Services: publicInfo{srv}})
	reflectionv1.RegisterServerReflectionServer(s, guardedReflection{n: n, inner: inner})
	reflectionv1alpha.RegisterServerReflectionServer(s, guardedReflectionAlpha{n: n,
		inner: reflection.NewServer(reflection.ServerOptions{Services: publicInfo{srv}})})
}

// guardedReflection is reflection behind the policy's admin check.
type guardedReflection struct {
	n     *Node
	inner reflectionv1.ServerReflectionServer
}

func (g guardedReflection) ServerReflectionInfo(stream reflectionv1.ServerReflection_ServerReflectionInfoServer) error {
	if _, _, err := g.n.authorize(stream.Context(), permAdmin, ""); err != nil {
		return toStatus(err)
	}
	return g.inner.ServerReflectionInfo(stream)
}

// guardedReflectionAlpha is guardedReflection for the v1alpha service.
type guardedReflectionAlpha struct {
	n     *Node
	inner reflectionv1alpha.ServerReflectionServer
}

func (g guardedReflectionAlpha) ServerReflectionInfo(stream reflectionv1alpha.ServerReflection_ServerReflectionInfoServer) error {
	if _, _, err := g.n.authorize(stream.Context(), permAdmin, ""); err != nil {
		return toStatus(err)
	}
	return g.inner.ServerReflectionInfo(stream)
}
