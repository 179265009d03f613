// Package loopback reserves free loopback addresses for test clusters,
// demos and local benchmarks: the one copy of that code for everything
// but the jepsen harness (which may import only client, fence and api, and
// keeps its own jepsen.FreeAddrs).
package loopback

import (
	"net"
	"sync"
)

// FreeAddrs returns n distinct free "127.0.0.1:port" addresses. All n are
// held open together before any is released, so no two are the same; they
// are released before use, so another process may take one meanwhile (a
// start on it then fails, saying so).
func FreeAddrs(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Silent listens on a free loopback address that accepts TCP connections
// and never answers on them: a silent peer, as a frozen host or a link that
// drops everything looks to a sender whose connection is up. stop closes
// the listener and every connection it accepted.
func Silent() (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String(), func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}, nil
}
