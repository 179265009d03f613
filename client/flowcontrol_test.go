package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/h2ping"
)

// okNode answers Status.
type okNode struct {
	api.UnimplementedClusterServiceServer
}

func (okNode) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	return &api.StatusResponse{}, nil
}

// TestClientSendsNoPingPerAnswer: a client that sizes its flow-control
// windows itself (bandwidth-delay estimation) answers a node's replies
// with PINGs, a write on both sides for each call at one call at a time.
// Its windows are fixed, so it sends none while calls flow
// (docs/PERFORMANCE.md, "Fixed flow-control windows").
func TestClientSendsNoPingPerAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The node's side fixes its windows too (as leased does): only the
	// client's pings are counted here.
	srv := grpc.NewServer(grpc.StaticStreamWindowSize(1<<20), grpc.StaticConnWindowSize(1<<20))
	api.RegisterClusterServiceServer(srv, okNode{})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	pings := h2ping.NewClientCounter()
	cl, err := client.New(client.Config{Endpoints: []string{ln.Addr().String()},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(pings.Dialer())}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const calls = 200
	for range calls {
		if err := cl.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings.Pings(); n != 0 {
		t.Errorf("%d calls: the client sent %d PINGs, want none", calls, n)
	}
}
