package client

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/internal/loopback"
)

// A keep-alive stream opened to a node that accepts the connection and
// never answers (a frozen host, a black-holed address) gives up after
// RequestTimeout and moves on, as a unary attempt does: gRPC alone waits
// out its 20 s connect timeout, longer than most ttls, so every lease
// kept alive through that node was lost while other nodes served.
func TestKeepAliveStreamToASilentNodeGivesUpAfterRequestTimeout(t *testing.T) {
	silent, stop, err := loopback.Silent()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	other, err := net.Listen("tcp", "127.0.0.1:0") // a second endpoint to move to
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, err := New(Config{Endpoints: []string{silent, other.Addr().String()}, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The session must end by its own bound, not by gRPC's connect
	// timeout or the test's deadline.
	if err := c.keeper.session(ctx); err == nil || !strings.Contains(err.Error(), "opened no stream") {
		t.Fatalf("the session to a silent node ended with %v; want it to give up on opening the stream", err)
	}
	if addr, _, _ := c.endpoint(); addr == silent {
		t.Fatal("the client still points at the silent node")
	}
}
