package jepsen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasefence/leasefence/internal/netns"
)

// ProxyNet is the proxy mode of Net: the harness owns one TCP proxy per
// directed pair (i, j) of nodes. Node i is started with
// --unsafe-peer-route so that it dials proxy(i, j) whenever it dials j's
// address (Raft, forwarding); the proxy forwards to j. Both directions of
// such a connection pass through the harness, which decides per
// direction of traffic (from a to b, whoever dialled) what happens to the
// bytes:
//
//   - up: copied as they come;
//   - cut (Partition: b does not receive from a): the bytes from a to b
//     are stalled, neither forwarded nor discarded. The proxy stops reading
//     once its small buffer is full, so TCP backpressure holds the rest in
//     the sender's socket, and everything is delivered in order on heal,
//     as TCP retransmission would after a real partition. Dropping bytes
//     instead would corrupt gRPC's framing (HTTP/2 frames would lose their
//     middle), which no real network can do to a TCP stream. A connection
//     with one direction stalled is dead for request/response: the peer's
//     deadlines and keepalives give up, as they would;
//   - delayed (Slow): each chunk is delivered delay + uniform[0, jitter)
//     after it was read, never before the chunk before it (order kept);
//   - flaky (Flaky p): a new connection is refused (reset) with
//     probability p, and each open one is reset (RST) with probability p
//     per second.
//
// Reordering or duplicating bytes is not offered, on purpose: TCP
// guarantees its stream in order and exactly once, so a reordered or
// duplicated byte is something no network can make a TCP receiver see;
// doing it here would test gRPC's frame decoder, not leasefence. Packet
// reordering, duplication and loss are absorbed by TCP below the stream
// and show up only as delay, which Slow and Partition already give.
type ProxyNet struct {
	ids   []string
	addrs map[string]string // node id -> its real address
	links map[[2]string]net.Listener

	mu      sync.Mutex
	blocked map[[2]string]bool // [a, b]: bytes from a to b are stalled
	grudge  map[string][]string
	delay   time.Duration
	jitter  time.Duration
	flaky   float64
	changed chan struct{} // closed and replaced on every change
	rng     *rand.Rand
	conns   map[*proxyConn]struct{}
	closed  bool
	stats   NetStats

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ Net = (*ProxyNet)(nil)

// proxyChunkSize is the most a pump reads at once; proxyChunks chunks may
// wait (delayed or stalled) per direction before the pump stops reading.
const (
	proxyChunkSize = 32 << 10
	proxyChunks    = 8
)

// NewProxyNet listens on one loopback proxy per directed pair of ids
// (addrs[i] is ids[i]'s real address) and starts serving them. Close
// stops them.
func NewProxyNet(ids, addrs []string, seed uint64) (*ProxyNet, error) {
	if len(ids) != len(addrs) {
		return nil, errors.New("proxy net: ids and addrs differ in length")
	}
	p := &ProxyNet{addrs: map[string]string{}, links: map[[2]string]net.Listener{}, blocked: map[[2]string]bool{},
		changed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0x70726f7879)), conns: map[*proxyConn]struct{}{},
		stop: make(chan struct{}), ids: append([]string(nil), ids...)}
	for i, id := range ids {
		p.addrs[id] = addrs[i]
	}
	for _, from := range ids {
		for _, to := range ids {
			if from == to {
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				p.Close()
				return nil, err
			}
			p.links[[2]string{from, to}] = ln
		}
	}
	for k, ln := range p.links {
		p.wg.Add(1)
		go p.serve(k[0], k[1], ln)
	}
	p.wg.Add(1)
	go p.resetter()
	return p, nil
}

// Routes returns the --unsafe-peer-route value for node id: every other
// node's address mapped to id's proxy towards it, sorted.
func (p *ProxyNet) Routes(id string) string {
	var out []string
	for _, to := range p.ids {
		if ln, ok := p.links[[2]string{id, to}]; ok {
			out = append(out, p.addrs[to]+"="+ln.Addr().String())
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// LinkAddr returns the address of proxy(from, to), "" if none.
func (p *ProxyNet) LinkAddr(from, to string) string {
	if ln, ok := p.links[[2]string{from, to}]; ok {
		return ln.Addr().String()
	}
	return ""
}

func (p *ProxyNet) known(id string) bool { _, ok := p.addrs[id]; return ok }

// broadcastLocked wakes every pump waiting on a state change.
func (p *ProxyNet) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Partition implements Net.
func (p *ProxyNet) Partition(grudge map[string][]string) error {
	if err := netns.CheckGrudge(grudge, p.known); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = map[[2]string]bool{}
	p.grudge = map[string][]string{}
	p.stats.Held = map[string]int64{}
	for b, froms := range grudge {
		for _, a := range froms {
			if a != b {
				p.blocked[[2]string{a, b}] = true
				p.grudge[b] = append(p.grudge[b], a)
			}
		}
	}
	p.broadcastLocked()
	return nil
}

// Slow implements Net.
func (p *ProxyNet) Slow(delay, jitter time.Duration) error {
	if delay < 0 || jitter < 0 {
		return fmt.Errorf("proxy net: negative delay %v or jitter %v", delay, jitter)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.jitter = delay, jitter
	p.stats.Delayed = 0
	p.broadcastLocked()
	return nil
}

// Flaky implements Net.
func (p *ProxyNet) Flaky(prob float64) error {
	if prob < 0 || prob > 1 {
		return fmt.Errorf("proxy net: probability %v outside [0, 1]", prob)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flaky = prob
	p.stats.Reset = 0
	return nil
}

// Heal implements Net.
func (p *ProxyNet) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked, p.grudge = map[[2]string]bool{}, nil
	p.delay, p.jitter, p.flaky = 0, 0, 0
	p.broadcastLocked()
	return nil
}

// Describe implements Net.
func (p *ProxyNet) Describe() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("proxy mode, %d link proxies, open connections %d; %s", len(p.links), len(p.conns), netns.GrudgeString(p.grudge))
	if len(p.grudge) > 0 {
		s += " (bytes stalled, delivered on heal)"
	}
	if p.delay > 0 || p.jitter > 0 {
		s += fmt.Sprintf("; delay %v + jitter [0,%v) per chunk, order kept", p.delay, p.jitter)
	}
	if p.flaky > 0 {
		s += fmt.Sprintf("; flaky: new connections refused with p=%.2f, open ones reset with p=%.2f per second", p.flaky, p.flaky)
	}
	return s
}

// Stats implements Net.
func (p *ProxyNet) Stats() NetStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Held = map[string]int64{}
	for k, v := range p.stats.Held {
		s.Held[k] = v
	}
	return s
}

func (p *ProxyNet) count(f func(*NetStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.stats)
}

// countHeld adds n bytes held back from a to b.
func (p *ProxyNet) countHeld(a, b string, n int) {
	p.count(func(s *NetStats) {
		if s.Held == nil {
			s.Held = map[string]int64{}
		}
		s.Held[a+"->"+b] += int64(n)
	})
}

// Close implements Net: it stops every proxy and closes every connection.
func (p *ProxyNet) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stop)
	p.broadcastLocked()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, ln := range p.links {
		ln.Close()
	}
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	return nil
}

func (p *ProxyNet) chance(prob float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return prob > 0 && p.rng.Float64() < prob
}

// serve accepts node from's connections towards to.
func (p *ProxyNet) serve(from, to string, ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		prob, closed := p.flaky, p.closed
		p.mu.Unlock()
		if closed || p.chance(prob) {
			if !closed {
				p.count(func(s *NetStats) { s.Reset++ }) // before the peer can see it
			}
			resetClose(c)
			continue
		}
		u, err := net.DialTimeout("tcp", p.addrs[to], 2*time.Second)
		if err != nil { // to is down: refuse, as its own port would
			resetClose(c)
			continue
		}
		pc := &proxyConn{a: c, b: u, done: make(chan struct{}), p: p}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.close(false)
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(4)
		go pc.pump(from, to, c, u)
		go pc.pump(to, from, u, c)
	}
}

// resetter resets open connections at random while flaky: every 100 ms
// each with probability p/10.
func (p *ProxyNet) resetter() {
	defer p.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		var victims []*proxyConn
		if p.flaky > 0 {
			for c := range p.conns {
				if p.rng.Float64() < p.flaky/10 {
					victims = append(victims, c)
				}
			}
		}
		p.mu.Unlock()
		p.count(func(s *NetStats) { s.Reset += int64(len(victims)) })
		for _, c := range victims {
			c.close(true)
		}
	}
}

// state returns whether bytes from a to b are stalled and a channel
// closed at the next change.
func (p *ProxyNet) state(a, b string) (bool, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked[[2]string{a, b}], p.changed
}

func (p *ProxyNet) chunkDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.delay
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int64N(int64(p.jitter)))
	}
	return d
}

// proxyConn is one proxied connection: a is the dialling node's side, b
// the dialled node's.
type proxyConn struct {
	p    *ProxyNet
	a, b net.Conn
	once sync.Once
	done chan struct{}
}

// close closes both sides (with RST when reset) and forgets the
// connection.
func (c *proxyConn) close(reset bool) {
	c.once.Do(func() {
		close(c.done)
		if reset {
			resetClose(c.a)
			resetClose(c.b)
		} else {
			c.a.Close()
			c.b.Close()
		}
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

type chunk struct {
	data []byte
	due  time.Time
	held bool // counted in NetStats.Held
}

// pump copies the bytes from a to b (src to dst): a reader that stamps
// each chunk with its due time and a writer that delivers chunks in order,
// each not before its due time and only while a→b is not cut. When src
// ends, pending chunks are still delivered (unless the connection dies
// first); then the whole connection is closed.
func (c *proxyConn) pump(a, b string, src, dst net.Conn) {
	ch := make(chan chunk, proxyChunks)
	go func() {
		defer c.p.wg.Done()
		defer close(ch)
		var last time.Time
		for {
			buf := make([]byte, proxyChunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(c.p.chunkDelay())
				if due.Before(last) {
					due = last // order kept: never before the previous chunk
				}
				last = due
				ck := chunk{data: buf[:n], due: due}
				if stalled, _ := c.p.state(a, b); stalled {
					ck.held = true
					c.p.countHeld(a, b, n)
				}
				select {
				case ch <- ck:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer c.p.wg.Done()
	defer c.close(false)
	for ck := range ch {
		late := false
		for {
			stalled, changed := c.p.state(a, b)
			if stalled {
				if !ck.held {
					ck.held = true
					c.p.countHeld(a, b, len(ck.data))
				}
				select {
				case <-changed:
					continue
				case <-c.done:
					return
				}
			}
			if wait := time.Until(ck.due); wait > 0 {
				late = true
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.done:
					t.Stop()
					return
				}
				continue // a partition may have begun meanwhile
			}
			break
		}
		if late {
			c.p.count(func(s *NetStats) { s.Delayed++ })
		}
		if _, err := dst.Write(ck.data); err != nil {
			return
		}
	}
}

// resetClose closes c with an RST instead of a FIN.
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
