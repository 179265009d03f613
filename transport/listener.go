package transport

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/credentials"
)

// PortConfig configures a Port.
type PortConfig struct {
	// TLS is the server's TLS configuration (LoadTLS); nil means plaintext,
	// where peers and clients cannot be told apart and every connection
	// goes to Clients().
	TLS *tls.Config
	// PeerIdentity is the URI SAN that marks a peer certificate; empty
	// means DefaultPeerIdentity.
	PeerIdentity string
	// MaxConnections and HandshakeTimeout: see Limits.
	MaxConnections   int
	HandshakeTimeout time.Duration
	// HandshakeReserve is how many connections may be in their TLS
	// handshake beyond MaxConnections (0: DefaultHandshakeReserve), so that
	// a peer still gets in when established clients fill the cap; a client
	// that comes in on it is closed after the handshake unless a slot has
	// freed. Ignored without TLS.
	HandshakeReserve int
	// Logger receives the port's logs; nil means hclog.Default().
	Logger hclog.Logger
}

// DefaultHandshakeReserve is the default PortConfig.HandshakeReserve.
const DefaultHandshakeReserve = 64

// PortStats are a Port's counters since it was made.
type PortStats struct {
	// Clients is the number of connections holding one of the
	// MaxConnections slots: clients, and connections in their handshake.
	Clients int
	// Handshaking is the number of connections in their TLS handshake:
	// some of Clients, plus Reserved.
	Handshaking int
	// Reserved is the number of handshaking connections in the handshake
	// reserve, past MaxConnections.
	Reserved int
	// Peers is the number of open connections that showed a peer
	// certificate (not counted against MaxConnections).
	Peers int
	// Refused counts connections closed because MaxConnections were held
	// by established connections: at accept (the reserve full too, or
	// plaintext), or after a client's handshake on the reserve.
	Refused uint64
	// Evicted counts handshaking connections closed to make room for a
	// new one when MaxConnections were open.
	Evicted uint64
	// HandshakeFailures counts TLS handshakes that failed or timed out.
	HandshakeFailures uint64
}

// Port is a node's one TCP port in front of its gRPC servers. It caps the
// open connections (PortConfig.MaxConnections; with TLS, peers are not
// counted once verified, and a small handshake reserve past the cap lets
// them in when established clients hold every slot; when reserve and cap
// are full, the connection longest in its handshake gives way to a new
// one), and with TLS it completes
// each connection's handshake itself, within HandshakeTimeout and off the
// accept loop, and hands the connection to Peers() when the verified client
// certificate carries the peer identity, else to Clients(). Serve a
// grpc.Server on each with HandshakenTLS() as its credentials, so that the
// peer's verified certificate reaches the interceptors as usual
// (credentials.TLSInfo in peer.Peer.AuthInfo).
//
// All methods are safe for concurrent use.
type Port struct {
	lis     net.Listener
	tls     *tls.Config
	peerID  string
	max     int
	timeout time.Duration
	log     hclog.Logger

	ctx    context.Context // cancelled by Close: handshakes give up
	cancel context.CancelFunc
	wg     sync.WaitGroup

	reserve int // handshake slots past the cap (TLS only)

	mu           sync.Mutex
	open         int        // counted connections
	reservedOpen int        // connections in the handshake reserve
	handshaking  *list.List // of *portConn, oldest first

	peers, clients *connQueue

	peerOpen          atomic.Int64
	refused           atomic.Uint64
	evicted           atomic.Uint64
	handshakeFailures atomic.Uint64

	// testHookHandshakeEnd, when set (tests only), runs after a handshake
	// has ended and its connection has left the handshaking list, before
	// the connection is closed or handed on.
	testHookHandshakeEnd atomic.Pointer[func(err error)]
}

// NewPort starts accepting on lis. Close stops it and closes lis.
func NewPort(lis net.Listener, cfg PortConfig) *Port {
	if cfg.PeerIdentity == "" {
		cfg.PeerIdentity = DefaultPeerIdentity
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.HandshakeReserve <= 0 {
		cfg.HandshakeReserve = DefaultHandshakeReserve
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	var tcfg *tls.Config
	if cfg.TLS != nil {
		tcfg = cfg.TLS.Clone()
		// gRPC clients insist on HTTP/2 being negotiated by ALPN.
		if !slices.Contains(tcfg.NextProtos, "h2") {
			tcfg.NextProtos = append([]string{"h2"}, tcfg.NextProtos...)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Port{
		lis: lis, tls: tcfg, peerID: cfg.PeerIdentity, max: cfg.MaxConnections, reserve: cfg.HandshakeReserve,
		timeout: cfg.HandshakeTimeout, log: cfg.Logger.Named("port"),
		ctx: ctx, cancel: cancel,
		handshaking: list.New(),
	}
	p.peers = newConnQueue(lis.Addr())
	p.clients = newConnQueue(lis.Addr())
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.acceptLoop() }()
	return p
}

// Peers returns the listener of connections whose verified certificate
// carries the peer identity. Without TLS it never yields a connection.
func (p *Port) Peers() net.Listener { return p.peers }

// Clients returns the listener of every other connection (all of them
// without TLS).
func (p *Port) Clients() net.Listener { return p.clients }

// Addr returns the address of the underlying listener.
func (p *Port) Addr() net.Addr { return p.lis.Addr() }

// Stats returns the port's counters.
func (p *Port) Stats() PortStats {
	p.mu.Lock()
	s := PortStats{Clients: p.open, Handshaking: p.handshaking.Len(), Reserved: p.reservedOpen}
	p.mu.Unlock()
	s.Peers = int(p.peerOpen.Load())
	s.Refused = p.refused.Load()
	s.Evicted = p.evicted.Load()
	s.HandshakeFailures = p.handshakeFailures.Load()
	return s
}

// Close stops accepting, closes the listener, both queues and every
// connection not yet handed to a server, and waits for the port's
// goroutines. Connections already handed over belong to their server.
func (p *Port) Close() error {
	p.cancel()
	err := p.lis.Close()
	p.peers.Close()
	p.clients.Close()
	p.mu.Lock()
	var pending []*portConn
	for e := p.handshaking.Front(); e != nil; e = e.Next() {
		pending = append(pending, e.Value.(*portConn))
	}
	p.mu.Unlock()
	for _, c := range pending {
		c.Close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Port) acceptLoop() {
	var delay time.Duration
	for {
		raw, err := p.lis.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				// Out of file descriptors, an aborted connection...: back
				// off and go on (as grpc.Server does), never stop serving.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				p.log.Warn("accept failed; retrying", "error", err, "delay", delay)
				select {
				case <-time.After(delay):
				case <-p.ctx.Done():
					return
				}
				continue
			}
			p.log.Error("accept failed; the port stops", "error", err)
			p.peers.fail(err)
			p.clients.fail(err)
			return
		}
		delay = 0
		c := &portConn{Conn: raw, port: p}
		if !p.admit(c) {
			p.refused.Add(1)
			raw.Close()
			continue
		}
		if p.tls == nil {
			p.clients.hand(p.ctx, c)
			continue
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.handshake(c) }()
	}
}

// admit counts c in. With the cap reached it takes, with TLS, one of the
// handshake reserve's slots (so a peer can still get in when established
// clients fill the cap), else the slot of the oldest handshaking
// connection, which it closes; otherwise c is refused (false).
func (p *Port) admit(c *portConn) bool {
	p.mu.Lock()
	var victim *portConn
	switch {
	case p.open < p.max:
		p.open++
		c.counted = true
	case p.tls != nil && p.reservedOpen < p.reserve:
		p.reservedOpen++
		c.reserved = true
	default:
		front := p.handshaking.Front()
		if front == nil {
			p.mu.Unlock()
			return false
		}
		victim = p.handshaking.Remove(front).(*portConn)
		victim.elem = nil
		victim.evicted = true
		// Its slot passes to c.
		c.counted, c.reserved = victim.counted, victim.reserved
		victim.counted, victim.reserved = false, false
	}
	if p.tls != nil {
		c.elem = p.handshaking.PushBack(c)
	}
	p.mu.Unlock()
	if victim != nil {
		p.evicted.Add(1)
		victim.Conn.Close()
	}
	return true
}

// handshake runs c's TLS handshake under the handshake timeout and hands
// the connection to the peer or the client queue.
func (p *Port) handshake(c *portConn) {
	_ = c.SetDeadline(time.Now().Add(p.timeout))
	tc := tls.Server(c, p.tls)
	err := tc.HandshakeContext(p.ctx)
	p.mu.Lock()
	evicted := c.evicted
	if c.elem != nil {
		p.handshaking.Remove(c.elem)
		c.elem = nil
	}
	if err != nil || evicted {
		// Its slot is free from the moment it leaves the list: a client
		// finishing its handshake on the reserve meanwhile must not find
		// the cap held by connections that are only waiting to be closed.
		p.release(c)
	}
	p.mu.Unlock()
	if hook := p.testHookHandshakeEnd.Load(); hook != nil {
		(*hook)(err)
	}
	if err != nil || evicted {
		if !evicted {
			p.handshakeFailures.Add(1)
			p.log.Debug("tls handshake failed", "remote", c.RemoteAddr().String(), "error", err)
		}
		tc.Close()
		return
	}
	// The HTTP/2 preface that follows is bounded by grpc.ConnectionTimeout.
	_ = c.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 && HasPeerIdentity(cs.VerifiedChains[0][0], p.peerID) {
		p.mu.Lock()
		p.release(c)
		c.peer = true
		p.mu.Unlock()
		p.peerOpen.Add(1)
		p.peers.hand(p.ctx, tc)
		return
	}
	// A client that came in on the reserve takes a counted slot: a free
	// one, else that of the oldest connection still in its handshake
	// (established clients win over handshaking ones), else it goes.
	p.mu.Lock()
	ok := !c.reserved
	var victim *portConn
	if c.reserved {
		if p.open >= p.max {
			for e := p.handshaking.Front(); e != nil; e = e.Next() {
				if v := e.Value.(*portConn); v.counted {
					victim = v
					break
				}
			}
			if victim != nil {
				p.handshaking.Remove(victim.elem)
				victim.elem = nil
				victim.evicted = true
				p.release(victim)
			}
		}
		if p.open < p.max {
			p.release(c)
			p.open++
			c.counted, ok = true, true
		}
	}
	p.mu.Unlock()
	if victim != nil {
		p.evicted.Add(1)
		victim.Conn.Close()
	}
	if !ok {
		p.refused.Add(1)
		tc.Close()
		return
	}
	p.clients.hand(p.ctx, tc)
}

// release gives back c's counted or reserved slot. Call with p.mu held.
func (p *Port) release(c *portConn) {
	if c.counted {
		c.counted = false
		p.open--
	}
	if c.reserved {
		c.reserved = false
		p.reservedOpen--
	}
}

// portConn is an accepted TCP connection; closing it gives its slot back.
type portConn struct {
	net.Conn
	port *Port
	once sync.Once

	// Guarded by port.mu.
	counted  bool // holds one of the MaxConnections slots
	reserved bool // holds a handshake reserve slot
	peer     bool
	evicted  bool
	elem     *list.Element // in port.handshaking while handshaking
}

func (c *portConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		p := c.port
		p.mu.Lock()
		p.release(c)
		if c.elem != nil {
			p.handshaking.Remove(c.elem)
			c.elem = nil
		}
		peer := c.peer
		p.mu.Unlock()
		if peer {
			p.peerOpen.Add(-1)
		}
	})
	return err
}

// connQueue is a net.Listener fed by the Port.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	err  error // returned by Accept once done; nil means net.ErrClosed
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// hand gives c to whoever accepts next, or closes it when the queue or the
// port is closed first.
func (q *connQueue) hand(ctx context.Context, c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	case <-ctx.Done():
		c.Close()
	}
}

func (q *connQueue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.Close()
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.err != nil {
			return nil, q.err
		}
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// HandshakenTLS returns server transport credentials for connections that
// a Port has already taken through the TLS handshake: ServerHandshake
// accepts the *tls.Conn as it is and returns its credentials.TLSInfo, so
// that interceptors see the verified client certificate as with
// credentials.NewTLS. Any other connection is refused. It cannot dial.
func HandshakenTLS() credentials.TransportCredentials { return handshakenTLS{} }

type handshakenTLS struct{}

var errNotHandshaken = errors.New("transport: connection did not come through the port's TLS handshake")

func (handshakenTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("transport: HandshakenTLS is for serving only")
}

func (handshakenTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil, errNotHandshaken
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete {
		return nil, nil, errNotHandshaken
	}
	return tc, credentials.TLSInfo{
		State:          cs,
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
}

func (handshakenTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (h handshakenTLS) Clone() credentials.TransportCredentials { return h }

func (handshakenTLS) OverrideServerName(string) error { return nil }
