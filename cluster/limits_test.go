package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/transport"
	"github.com/leasefence/leasefence/transport/transportpb"
)

// openRaw opens n plain TCP connections to addr that never say anything.
func openRaw(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		out = append(out, c)
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// closedByPeer reports whether the node has closed c: a read sees EOF or a
// reset within wait (a read timeout means it is still open).
func closedByPeer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b [512]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue // e.g. a server's HTTP/2 settings or GOAWAY: keep reading
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		return true
	}
}

// countClosed waits up to d for the node to close connections and returns
// how many it closed.
func countClosed(conns []net.Conn, d time.Duration) int {
	closed := make([]bool, len(conns))
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for i, c := range conns {
			if !closed[i] && closedByPeer(c, 20*time.Millisecond) {
				closed[i] = true
			}
		}
	}
	n := 0
	for _, c := range closed {
		if c {
			n++
		}
	}
	return n
}

// A node with a cap of N connections closes the connections past it
// promptly, refuses a new client while the cap is full, and serves it once
// others have closed (plaintext: no handshake to tell who is silent).
func TestConnectionCapClosesExtraConnectionsAndServesAfterOthersClose(t *testing.T) {
	const capN, extra = 8, 4
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Limits.MaxConnections = capN
		c.Limits.HandshakeTimeout = time.Minute // only the cap may close them
		c.MetricsListen = "127.0.0.1:0"
	})
	addr := tc.nodes[0].Addr()
	raw := openRaw(t, addr, capN+extra)
	if got := countClosed(raw, 2*time.Second); got != extra {
		t.Fatalf("%d of %d idle connections closed within 2s with a cap of %d; want %d", got, capN+extra, capN, extra)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := api.NewLeaseServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = lc.Acquire(ctx, &api.AcquireRequest{Resource: "cap/full", Holder: "h", Ttl: durationpb.New(5 * time.Second)})
	cancel()
	if err == nil {
		t.Fatal("served a new connection while the cap was full")
	}
	t.Logf("while full: %v", err)
	for _, c := range raw {
		c.Close()
	}
	eventually(t, 10*time.Second, "an honest client is served once the idle connections closed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := lc.Acquire(ctx, &api.AcquireRequest{Resource: "cap/after", Holder: "h", Ttl: durationpb.New(5 * time.Second), RequestId: "cap-after"})
		return err == nil
	})
	if st := tc.nodes[0].server.port.Stats(); st.Refused < extra {
		t.Errorf("refused counter %d, want at least %d", st.Refused, extra)
	}
	resp, err := testHTTP.Get("http://" + tc.nodes[0].MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var refused float64 = -1
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "leasefence_connections_refused_total "); ok {
			refused, _ = strconv.ParseFloat(v, 64)
		}
	}
	if refused < extra || !strings.Contains(string(body), `leasefence_connections_open{kind="client"}`) {
		t.Errorf("metrics: refused %v, want at least %d, and connections_open by kind", refused, extra)
	}
}

// tlsClientConfig trusts fx's CA and presents leaf.
func tlsClientConfig(t *testing.T, fx *tlsFixture, leaf *certgen.Leaf) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(fx.ca.CertPEM)
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
}

// http2Preface is what an HTTP/2 client sends first: the preface and an
// empty SETTINGS frame.
var http2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// readFramesUntilClosed reads HTTP/2 frames from c until the node closes
// it or d passes, and reports whether a GOAWAY came and the connection
// closed.
func readFramesUntilClosed(c net.Conn, d time.Duration) (goaway, closed bool) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			var ne net.Error
			return goaway, !(errors.As(err, &ne) && ne.Timeout())
		}
		n := int(binary.BigEndian.Uint32(append([]byte{0}, hdr[:3]...)))
		if hdr[3] == 0x7 {
			goaway = true
		}
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			var ne net.Error
			return goaway, !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// A node closes a connection that never starts TLS, one that finishes TLS
// and never speaks HTTP/2, both within the handshake timeout, and an
// HTTP/2 connection without calls after the idle timeout (GOAWAY).
func TestSilentAndIdleConnectionsAreClosed(t *testing.T) {
	fx := newTLSFixture(t)
	tc := newTestCluster(t, 1, func(c *Config) {
		c.TLS = fx.files(c.ID)
		c.Limits.HandshakeTimeout = 500 * time.Millisecond
		c.Limits.IdleTimeout = time.Second
	})
	addr := tc.nodes[0].Addr()
	clientCert, err := fx.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no TLS handshake", func(t *testing.T) {
		raw := openRaw(t, addr, 1)
		if !closedByPeer(raw[0], 3*time.Second) {
			t.Fatal("a connection that never started TLS is still open after 3s (handshake timeout 500ms)")
		}
	})
	t.Run("TLS but no HTTP/2 preface", func(t *testing.T) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, tlsClientConfig(t, fx, clientCert))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if !closedByPeer(c, 3*time.Second) {
			t.Fatal("a TLS connection without an HTTP/2 preface is still open after 3s (handshake timeout 500ms)")
		}
	})
	t.Run("HTTP/2 without calls", func(t *testing.T) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, tlsClientConfig(t, fx, clientCert))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(http2Preface); err != nil {
			t.Fatal(err)
		}
		// GOAWAY after 1s idle; the connection closes once the server's
		// second GOAWAY is sent (at most 5s after the first, gRPC's drain).
		goaway, closed := readFramesUntilClosed(c, 10*time.Second)
		if !goaway || !closed {
			t.Fatalf("idle HTTP/2 connection: goaway %v, closed %v within 10s (idle timeout 1s)", goaway, closed)
		}
	})
}

// With mutual TLS a client's message above the client limit is refused
// with ResourceExhausted (from its header, before it is buffered), while
// peers still exchange messages far above it: a 2 MiB AppendEntries from a
// peer certificate reaches raft, and the cluster replicates entries larger
// than the client limit.
func TestClientMessageLimitLeavesPeersTheirLargeMessages(t *testing.T) {
	fx := newTLSFixture(t)
	// The smallest client limit, so that entries above it form for sure
	// (the replication case below).
	limit := transport.MinClientMessage
	tc := newTestCluster(t, 3, func(c *Config) { c.TLS = fx.files(c.ID); c.Limits.MaxClientMessage = limit })
	li, leader := tc.leader()
	_, follower := tc.follower()
	clientCert, err := fx.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	peerLeaf, err := fx.ca.Peer("n9", transport.DefaultPeerIdentity)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("client message above the client limit", func(t *testing.T) {
		lc := api.NewLeaseServiceClient(fx.dial(t, follower.Addr(), clientCert))
		_, err := lc.Acquire(ctxT(t), &api.AcquireRequest{Resource: "big/holder", Holder: strings.Repeat("h", 2*limit), Ttl: durationpb.New(5 * time.Second)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("acquire with a %d-byte holder: got %v, want ResourceExhausted", 2*limit, err)
		}
		t.Logf("refused: %v", err)
		// The same connection still serves a valid call.
		if _, err := lc.Acquire(ctxT(t), &api.AcquireRequest{Resource: "big/ok", Holder: "h", Ttl: durationpb.New(5 * time.Second)}); err != nil {
			t.Fatalf("valid acquire after the refusal: %v", err)
		}
	})

	t.Run("peer AppendEntries above the client limit", func(t *testing.T) {
		rt := transportpb.NewRaftTransportClient(fx.dial(t, follower.Addr(), peerLeaf))
		// A stale term: raft answers with success=false, no error.
		_, err := rt.AppendEntries(ctxT(t), &transportpb.AppendEntriesRequest{
			Header:  &transportpb.RPCHeader{ProtocolVersion: 3, Id: []byte("n9"), Addr: []byte("127.0.0.1:1")},
			Term:    0,
			Entries: []*transportpb.Log{{Index: 1, Term: 0, Type: 0, Data: bytes.Repeat([]byte{1}, 2<<20)}},
		})
		if err != nil {
			t.Fatalf("2 MiB AppendEntries from a peer certificate: %v", err)
		}
		// A client certificate gets no such room.
		crt := transportpb.NewRaftTransportClient(fx.dial(t, follower.Addr(), clientCert))
		_, err = crt.AppendEntries(ctxT(t), &transportpb.AppendEntriesRequest{
			Header:  &transportpb.RPCHeader{ProtocolVersion: 3},
			Entries: []*transportpb.Log{{Data: bytes.Repeat([]byte{1}, 2<<20)}},
		})
		if c := status.Code(err); c != codes.ResourceExhausted && c != codes.PermissionDenied {
			t.Fatalf("2 MiB AppendEntries from a client certificate: got %v", err)
		}
	})

	t.Run("replication of entries above the client limit", func(t *testing.T) {
		lc := api.NewLeaseServiceClient(fx.dial(t, leader.Addr(), clientCert))
		name := func(i int, p string) string {
			return p + strings.Repeat("x", 240) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		}
		largest := 0
		for round := 0; round < 5 && largest <= limit; round++ {
			first := leader.raft.LastIndex() + 1
			var wg sync.WaitGroup
			for i := 0; i < 400; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, _ = lc.Acquire(ctx, &api.AcquireRequest{
						Resource: name(round*400+i, "r"), Scope: name(round*400+i, "s"), Holder: strings.Repeat("h", 250),
						Ttl: durationpb.New(time.Minute), RequestId: fmt.Sprintf("big-%d-%d", round, i),
					})
				}()
			}
			wg.Wait()
			last := leader.raft.LastIndex()
			for idx := first; idx <= last; idx++ {
				var l raft.Log
				if err := leader.sm.logs.GetLog(idx, &l); err == nil && len(l.Data) > largest {
					largest = len(l.Data)
				}
			}
		}
		if largest <= limit {
			t.Fatalf("no entry above %d bytes formed (largest %d): nothing to show", limit, largest)
		}
		want := leader.AppliedIndex()
		eventually(t, 15*time.Second, "every node applies the large entries", func() bool {
			for _, n := range tc.nodes {
				if n.AppliedIndex() < want {
					return false
				}
			}
			return true
		})
		t.Logf("largest entry replicated: %d bytes (client limit %d), leader n%d", largest, limit, li+1)
	})
}

// With TLS, connections still in their handshake give way to established
// ones, and peers always get in: a flood of silent connections filling the
// cap cannot lock out a certified client (it runs its handshake on the
// reserve past the cap, then takes the slot of the oldest silent one);
// when established clients fill the cap, a peer still gets in and a new
// client is closed after its handshake.
func TestSilentConnectionsCannotLockOutCertifiedClientsOrPeers(t *testing.T) {
	const capN = 8
	fx := newTLSFixture(t)
	tc := newTestCluster(t, 1, func(c *Config) {
		c.TLS = fx.files(c.ID)
		c.Limits.MaxConnections = capN
		c.Limits.HandshakeTimeout = time.Minute // only the cap may close them
	})
	n := tc.nodes[0]
	clientCert, err := fx.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	peerLeaf, err := fx.ca.Peer("n9", transport.DefaultPeerIdentity)
	if err != nil {
		t.Fatal(err)
	}
	raw := openRaw(t, n.Addr(), capN)
	eventually(t, 5*time.Second, "the silent connections are counted", func() bool {
		return n.server.port.Stats().Handshaking == capN
	})
	if _, err := acquireOn(t, fx.dial(t, n.Addr(), clientCert), "evict/served"); err != nil {
		t.Fatalf("certified client while silent connections filled the cap: %v", err)
	}
	if got := countClosed(raw, time.Second); got != 1 {
		t.Errorf("%d silent connections closed to make room, want 1", got)
	}
	if st := n.server.port.Stats(); st.Evicted != 1 || st.Clients != capN || st.Handshaking != capN-1 {
		t.Errorf("stats %+v: want 1 evicted, %d counted, %d handshaking", st, capN, capN-1)
	}
	// Certified clients take the remaining slots, one after the other,
	// each from a silent connection.
	var conns []net.Conn
	for i := 0; i < capN-1; i++ {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", n.Addr(), tlsClientConfig(t, fx, clientCert))
		if err != nil {
			t.Fatalf("certified connection %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
		eventually(t, 5*time.Second, "the server finished the handshake", func() bool {
			return n.server.port.Stats().Handshaking == capN-2-i
		})
	}
	if st := n.server.port.Stats(); st.Handshaking != 0 || st.Clients != capN {
		t.Fatalf("stats %+v: want only established clients, %d of them", st, capN)
	}
	// Established clients fill the cap: a peer still gets in...
	prt := transportpb.NewRaftTransportClient(fx.dial(t, n.Addr(), peerLeaf))
	if _, err := prt.AppendEntries(ctxT(t), &transportpb.AppendEntriesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("peer at a cap full of clients: got %v, want InvalidArgument from the transport", err)
	}
	// ...and a new client is closed after its handshake.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", n.Addr(), tlsClientConfig(t, fx, clientCert))
	if err == nil {
		defer c.Close()
		if !closedByPeer(c, 2*time.Second) {
			t.Fatal("a client past a cap full of established clients was not closed")
		}
	}
	if got := countClosed(conns, 200*time.Millisecond); got != 0 {
		t.Errorf("%d established client connections were closed", got)
	}
	if st := n.server.port.Stats(); st.Refused < 1 || st.Peers < 1 {
		t.Errorf("stats %+v: want a refusal and a peer", st)
	}
}

// Without TLS the handshake timeout bounds the HTTP/2 preface: a silent
// plaintext connection is closed within it (gRPC's default is 120 s).
func TestSilentPlaintextConnectionIsClosedAfterTheHandshakeTimeout(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.Limits.HandshakeTimeout = 500 * time.Millisecond })
	raw := openRaw(t, tc.nodes[0].Addr(), 1)
	if !closedByPeer(raw[0], 3*time.Second) {
		t.Fatal("a plaintext connection without an HTTP/2 preface is still open after 3s (handshake timeout 500ms)")
	}
}
