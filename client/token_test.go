package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// tokenEcho answers Get and reports the authorization metadata it saw.
type tokenEcho struct {
	api.UnimplementedLeaseServiceServer
	seen chan []string
}

func (e *tokenEcho) Get(ctx context.Context, _ *api.GetRequest) (*api.GetResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	e.seen <- md.Get("authorization")
	return &api.GetResponse{}, nil
}

func TestConfigTokenIsSentAsBearer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	echo := &tokenEcho{seen: make(chan []string, 4)}
	api.RegisterLeaseServiceServer(srv, echo)
	go srv.Serve(ln)
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, token := range []string{"s3cret-token-0123", ""} {
		c, err := client.New(client.Config{Endpoints: []string{ln.Addr().String()}, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		got := <-echo.seen
		if token == "" && len(got) != 0 || token != "" && (len(got) != 1 || got[0] != "Bearer "+token) {
			t.Errorf("token %q: server saw %q", token, got)
		}
	}
}
