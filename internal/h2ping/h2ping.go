// Package h2ping counts the HTTP/2 PING frames a connection writes, for
// tests that hold gRPC connections to one write per message: a flow-control
// window gRPC sizes itself (bandwidth-delay estimation) has the receiver of
// a message answer it with a PING, which costs both sides a write and a
// wake-up (docs/PERFORMANCE.md, "Fixed flow-control windows").
package h2ping

import (
	"context"
	"net"
	"sync"
)

// Preface is what an HTTP/2 client writes before its first frame.
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Counter counts the PING frames (acknowledgements not included) in the
// bytes written on the connections it wraps. The zero value counts a
// server's side; a client's skips the preface (NewClientCounter). One
// Counter follows one connection: frames are parsed across its writes.
type Counter struct {
	mu      sync.Mutex
	preface int    // bytes of the client preface still to skip
	buf     []byte // bytes written but not yet parsed into whole frames
	pings   int
}

// NewClientCounter returns a Counter for the client's side of a
// connection.
func NewClientCounter() *Counter { return &Counter{preface: len(Preface)} }

// Pings returns the PING frames written so far.
func (c *Counter) Pings() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pings
}

func (c *Counter) wrote(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, b...)
	if n := min(c.preface, len(c.buf)); n > 0 {
		c.buf, c.preface = c.buf[n:], c.preface-n
	}
	for len(c.buf) >= 9 { // a frame header: length (3), type, flags, stream (4)
		n := 9 + (int(c.buf[0])<<16 | int(c.buf[1])<<8 | int(c.buf[2]))
		if len(c.buf) < n {
			return
		}
		if typ, flags := c.buf[3], c.buf[4]; typ == 0x6 && flags&0x1 == 0 {
			c.pings++
		}
		c.buf = c.buf[n:]
	}
}

// Conn returns conn with its writes counted by c.
func (c *Counter) Conn(conn net.Conn) net.Conn { return countingConn{conn, c} }

// Dialer returns a dialer (for grpc.WithContextDialer) of TCP connections
// counted by c.
func (c *Counter) Dialer() func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return c.Conn(conn), nil
	}
}

// Listener returns ln with the connections it accepts counted by c.
func (c *Counter) Listener(ln net.Listener) net.Listener { return countingListener{ln, c} }

type countingConn struct {
	net.Conn
	c *Counter
}

func (cc countingConn) Write(b []byte) (int, error) {
	cc.c.wrote(b)
	return cc.Conn.Write(b)
}

type countingListener struct {
	net.Listener
	c *Counter
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.c.Conn(conn), nil
}
