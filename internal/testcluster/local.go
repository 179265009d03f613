package testcluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
)

// Local is an n-node cluster of real cluster.Node-s inside the test's
// process, in the manner of hashicorp/raft's testing.go: real Raft with
// raft-boltdb in t.TempDir(), real gRPC on loopback, and a link between
// every ordered pair of nodes that the test can cut.
//
// Why links and not raft's in-memory transport: a Node builds its own
// transport (the gRPC one, which also carries forwarding and joins) and
// takes none from outside, so an in-memory transport would cut Raft but
// leave forwarding connected. Instead every node dials every peer through
// a loopback proxy of its own (Config.Unsafe.PeerRoutes, the hook jepsen's
// proxy mode uses): the proxy from i to j carries everything i sends j
// (Raft, forwarded calls). Partition closes the links that cross the cut
// and refuses new connections on them; Heal lets them through again. A
// cut is a refusal (the dialer sees the connection close), not a silent
// drop: it is fast and deterministic, and leadership loss and elections
// follow from raft's own timeouts as on a real network. HoldAnswers,
// Freeze and Thaw hold bytes on the links instead of dropping them: a node
// whose peers' answers, or all of whose traffic, arrive late and in order,
// as for a paused process.
//
// Test clients (Client) dial nodes directly, not through links: a
// partition separates nodes from each other, not from the test.
type Local struct {
	t     testing.TB
	Nodes []*cluster.Node
	cfgs  []cluster.Config

	mu    sync.Mutex
	links map[[2]int]*link // [from, to]
}

// LocalTimings are short raft timeouts for a Local cluster, so that a
// lost leader is noticed and replaced within about half a second, yet long
// enough that a busy test machine (-race, shared cores) does not make
// leadership flap.
func LocalTimings(c *cluster.Config) {
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// NewLocal starts an n-node cluster (ids n1..nN, bootstrapped together)
// and waits for a leader. tweak, when not nil, changes each node's Config
// before it starts (LocalTimings is applied first). Every node is closed
// and every link stopped when the test ends; node logs go to t.Log at warn.
func NewLocal(t testing.TB, n int, tweak func(i int, c *cluster.Config)) *Local {
	t.Helper()
	addrs := FreeAddrs(t, n)
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprintf("n%d", i+1)] = a
	}
	lc := &Local{t: t, Nodes: make([]*cluster.Node, n), links: map[[2]int]*link{}}
	t.Cleanup(lc.close)
	for i := range addrs {
		for j := range addrs {
			if i != j {
				l, err := newLink(addrs[j])
				if err != nil {
					t.Fatal(err)
				}
				lc.links[[2]int{i, j}] = l
			}
		}
	}
	for i, a := range addrs {
		cfg := cluster.DefaultConfig()
		cfg.ID, cfg.Listen, cfg.DataDir = fmt.Sprintf("n%d", i+1), a, t.TempDir()
		cfg.Bootstrap = peers
		cfg.Insecure = true // loopback, tests only
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Warn, Output: tlog{t}})
		LocalTimings(&cfg)
		cfg.Unsafe.PeerRoutes = map[string]string{}
		for j, b := range addrs {
			if j != i {
				cfg.Unsafe.PeerRoutes[b] = lc.links[[2]int{i, j}].addr()
			}
		}
		if tweak != nil {
			tweak(i, &cfg)
		}
		lc.cfgs = append(lc.cfgs, cfg)
	}
	for i := range lc.cfgs {
		node, err := cluster.Start(lc.cfgs[i])
		if err != nil {
			t.Fatalf("start %s: %v", lc.cfgs[i].ID, err)
		}
		lc.Nodes[i] = node
	}
	lc.Leader()
	return lc
}

func (lc *Local) close() {
	for _, n := range lc.Nodes {
		if n != nil {
			n.Close()
		}
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, l := range lc.links {
		l.stop()
	}
}

// Partition cuts the nodes in side off from the others: links between a
// node in side and one outside are closed and refuse new connections;
// links within each side stay up. It replaces any earlier partition.
func (lc *Local) Partition(side ...int) {
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for k, l := range lc.links {
		l.setCut(in[k[0]] != in[k[1]])
	}
}

// HoldAnswers holds what node i's peers answer on the connections i
// opened to them (Raft's answers to i's appends and heartbeats, answers to
// calls i forwards): they arrive, late and in order, at Thaw. What i sends
// still goes through.
func (lc *Local) HoldAnswers(i int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for k, l := range lc.links {
		if k[0] == i {
			l.setHeld(1, true)
		}
	}
}

// Freeze holds every byte to and from node i on its links, both ways: to
// its peers i is silent, as a paused process is, while it keeps running;
// what was sent waits and arrives, in order, at Thaw. Test clients still
// reach i directly.
func (lc *Local) Freeze(i int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for k, l := range lc.links {
		if k[0] == i || k[1] == i {
			l.setHeld(0, true)
			l.setHeld(1, true)
		}
	}
}

// Thaw ends every hold (HoldAnswers, Freeze): what waited is delivered.
func (lc *Local) Thaw() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, l := range lc.links {
		l.setHeld(0, false)
		l.setHeld(1, false)
	}
}

// Heal lets every link through again; nodes reconnect on their own
// (raft's transport and the forwarder redial with their backoff).
func (lc *Local) Heal() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, l := range lc.links {
		l.setCut(false)
	}
}

// Leader waits up to 10 s until exactly one node among among (all nodes
// when empty) leads and serves as leader, and returns its index. Two nodes
// may both believe they lead for a moment after a partition (the old one
// until its leader lease runs out); Leader waits that out.
func (lc *Local) Leader(among ...int) int {
	lc.t.Helper()
	if len(among) == 0 {
		for i := range lc.Nodes {
			among = append(among, i)
		}
	}
	leader := -1
	lc.eventually(10*time.Second, "one leader", func() bool {
		leader = -1
		for _, i := range among {
			if n := lc.Nodes[i]; n != nil && n.IsLeader() {
				if leader >= 0 {
					return false
				}
				leader = i
			}
		}
		return leader >= 0
	})
	return leader
}

// WaitApplied waits up to 10 s until every node in nodes (all when empty)
// has applied index idx.
func (lc *Local) WaitApplied(idx uint64, nodes ...int) {
	lc.t.Helper()
	if len(nodes) == 0 {
		for i := range lc.Nodes {
			nodes = append(nodes, i)
		}
	}
	for _, i := range nodes {
		n := lc.Nodes[i]
		lc.eventually(10*time.Second, fmt.Sprintf("%s to apply index %d", n.ID(), idx), func() bool { return n.AppliedIndex() >= idx })
	}
}

// Client dials node i directly over gRPC (never through a link).
func (lc *Local) Client(i int) api.LeaseServiceClient {
	lc.t.Helper()
	conn, err := grpc.NewClient(lc.Nodes[i].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		lc.t.Fatal(err)
	}
	lc.t.Cleanup(func() { conn.Close() })
	return api.NewLeaseServiceClient(conn)
}

func (lc *Local) eventually(d time.Duration, what string, cond func() bool) {
	lc.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			lc.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tlog writes log lines to t.Log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// link is a loopback TCP proxy to one node, used by one other node. When
// cut it closes the connections it carries and every new one at once.
type link struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	held  [2]bool    // [what the dialer sends, what the target answers]
	open  *sync.Cond // on mu: a hold ended or the link was cut
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(target string) (*link, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	l.open = sync.NewCond(&l.mu)
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

func (l *link) addr() string { return l.lis.Addr().String() }

func (l *link) serve() {
	defer l.wg.Done()
	for {
		c, err := l.lis.Accept()
		if err != nil {
			return // stopped
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.carry(c)
	}
}

// carry pipes c to the target both ways until either side ends or the
// link is cut.
func (l *link) carry(c net.Conn) {
	defer l.wg.Done()
	defer l.forget(c)
	up, err := net.DialTimeout("tcp", l.target, time.Second)
	if err != nil {
		c.Close()
		return
	}
	l.mu.Lock()
	if l.cut { // cut while dialling
		l.mu.Unlock()
		up.Close()
		c.Close()
		return
	}
	l.conns[up] = struct{}{}
	l.mu.Unlock()
	defer l.forget(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, dir int) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !l.pass(dir) {
					break
				}
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c, 0)
	go pipe(c, up, 1)
	<-done
	<-done
}

// pass waits while direction dir is held; false once the link is cut.
func (l *link) pass(dir int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held[dir] && !l.cut {
		l.open.Wait()
	}
	return !l.cut
}

func (l *link) forget(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

// setHeld holds (or lets through again) one direction of the link:
// bytes already read wait in the proxy, the rest in the kernel's buffers,
// and all of them arrive, in order, once the hold ends.
func (l *link) setHeld(dir int, held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[dir] = held
	l.open.Broadcast()
}

func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	l.open.Broadcast()
	if cut {
		for c := range l.conns {
			c.Close()
		}
	}
}

func (l *link) stop() {
	l.lis.Close()
	l.setCut(true)
	l.wg.Wait()
}

// WithTimeout is a context for one call of a test: ended after d or when
// the test ends.
func WithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
