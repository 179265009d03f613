package transport

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leasefence/leasefence/internal/h2ping"
)

// TestPeerConnectionsSendNoPings: between nodes, neither side pings while
// calls flow. A window gRPC sizes itself (bandwidth-delay estimation)
// makes the receiver of a message that starts a sample send a PING, which
// the sender acknowledges: two more writes and two more wake-ups for
// every call at one call at a time, as in the replication round trip of
// a 1-client cycle (docs/PERFORMANCE.md, "Fixed flow-control windows").
func TestPeerConnectionsSendNoPings(t *testing.T) {
	server, client := &h2ping.Counter{}, h2ping.NewClientCounter()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(DefaultLimits().PeerServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(server.Listener(ln)) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	conn, err := grpc.NewClient(ln.Addr().String(), append(PeerDialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(client.Dialer()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const calls = 200
	for range calls {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// Keepalive pings come after 30 s of silence (KeepaliveTime), not here.
	if s, c := server.Pings(), client.Pings(); s != 0 || c != 0 {
		t.Errorf("%d calls: the server sent %d PINGs and the client %d, want none", calls, s, c)
	}
}
