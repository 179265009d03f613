package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// A keep-alive stream opened to a node that accepts the connection and
// never answers (a frozen host, a black-holed address) gives up after
// RequestTimeout and moves on, as a unary attempt does: gRPC alone waits
// out its 20 s connect timeout, longer than most ttls, so every lease
// kept alive through that node was lost while other nodes served.
func TestKeepAliveStreamToASilentNodeGivesUpAfterRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	other, err := net.Listen("tcp", "127.0.0.1:0") // a second endpoint to move to
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, err := New(Config{Endpoints: []string{ln.Addr().String(), other.Addr().String()}, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.keeper.session(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the session to a silent node ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session to a silent node was still opening its stream after 10 s (RequestTimeout 500 ms)")
	}
	if addr, _, _ := c.endpoint(); addr == ln.Addr().String() {
		t.Fatal("the client still points at the silent node")
	}
}
