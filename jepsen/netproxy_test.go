package jepsen

import (
	"io"
	"net"
	"testing"
	"time"
)

// proxyPair starts a backend standing for node b, a ProxyNet over nodes a
// and b, and one connection a dials through proxy(a, b). It returns a's
// side and b's side of that connection.
func proxyPair(t *testing.T) (*ProxyNet, net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	p, err := NewProxyNet([]string{"a", "b"}, []string{"127.0.0.1:1", ln.Addr().String()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	a, err := net.Dial("tcp", p.LinkAddr("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	select {
	case b := <-accepted:
		t.Cleanup(func() { b.Close() })
		return p, a, b
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not connect to the backend")
	}
	return nil, nil, nil
}

// readWithin reads exactly n bytes within d, or reports what it got.
func readWithin(c net.Conn, n int, d time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, n)
	k, err := io.ReadFull(c, buf)
	return string(buf[:k]), err
}

func TestProxyCutStallsOneDirectionAndHealDeliversInOrder(t *testing.T) {
	p, a, b := proxyPair(t)
	if err := p.Partition(map[string][]string{"b": {"a"}}); err != nil { // b does not receive from a
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("held-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("held-2")); err != nil {
		t.Fatal(err)
	}
	if got, err := readWithin(b, 1, 300*time.Millisecond); err == nil {
		t.Fatalf("b received %q from a across the cut", got)
	}
	// The other direction still flows.
	if _, err := b.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if got, err := readWithin(a, 4, 2*time.Second); err != nil || got != "pong" {
		t.Fatalf("a got %q, %v from b; want pong", got, err)
	}
	if held := p.Stats().Held["a->b"]; held != 12 {
		t.Fatalf("stats: %d bytes held a->b, want 12", held)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if got, err := readWithin(b, 12, 2*time.Second); err != nil || got != "held-1held-2" {
		t.Fatalf("after heal b got %q, %v; want every held byte in order", got, err)
	}
}

func TestProxyDelayIsApplied(t *testing.T) {
	p, a, b := proxyPair(t)
	if err := p.Slow(500*time.Millisecond, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, s := range []string{"1", "2", "3"} {
		a.Write([]byte(s))
	}
	got, err := readWithin(b, 3, 3*time.Second)
	took := time.Since(start)
	if err != nil || got != "123" {
		t.Fatalf("got %q, %v", got, err)
	}
	if took < 500*time.Millisecond {
		t.Fatalf("delivered after %v, want at least the 500ms delay", took)
	}
	if p.Stats().Delayed == 0 {
		t.Fatal("stats count no delayed chunk")
	}
	p.Slow(0, 0)
	start = time.Now()
	a.Write([]byte("4"))
	if got, err := readWithin(b, 1, 2*time.Second); err != nil || got != "4" || time.Since(start) > 400*time.Millisecond {
		t.Fatalf("after the delay ended: %q, %v after %v", got, err, time.Since(start))
	}
}

func TestProxyFlakyResetsAndRefuses(t *testing.T) {
	p, a, _ := proxyPair(t)
	if err := p.Flaky(1); err != nil {
		t.Fatal(err)
	}
	// The open connection is reset (p per second: within a few seconds).
	if _, err := readWithin(a, 1, 10*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("open connection not reset: %v", err)
	}
	// A new one is refused.
	c, err := net.Dial("tcp", p.LinkAddr("a", "b"))
	if err == nil {
		defer c.Close()
		if _, err = readWithin(c, 1, 2*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("new connection not refused: %v", err)
		}
	}
	if p.Stats().Reset < 2 {
		t.Fatalf("stats: %d resets, want the open one and the refused one", p.Stats().Reset)
	}
	if d := p.Describe(); d == "" {
		t.Fatal("no description")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
