package jepsen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/netns"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// Build compiles leased and fencedkv (and, when jepsenToo, jepsen/cmd/jepsen) into
// dir with `go build`: leased and fencedkv in the root module, jepsen in
// the harness's own module (jepsen/, with a replace to the root). Both are
// found from the module of the working directory (`go env GOMOD`): the
// repository root or anywhere inside jepsen/. With planted set, leased and
// fencedkv are built with the plantedbugs tag: a test build whose
// deliberate defects LEASEFENCE_PLANTED_BUGS switches on.
func Build(ctx context.Context, dir string, race, jepsenToo, planted bool) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return errors.New("not inside the leasefence module: run from the repository or pass --bin-dir")
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "leased")); err != nil {
		// Inside the harness's module: the root module is its parent.
		root = filepath.Dir(root)
	}
	args := []string{"build", "-o", dir + "/"}
	if race {
		args = append(args, "-race")
	}
	if planted {
		args = append(args, "-tags", "plantedbugs")
	}
	builds := []struct {
		dir  string
		pkgs []string
	}{{root, []string{"./cmd/leased", "./cmd/fencedkv"}}}
	if jepsenToo {
		builds = append(builds, struct {
			dir  string
			pkgs []string
		}{filepath.Join(root, "jepsen"), []string{"./cmd/jepsen"}})
	}
	for _, b := range builds {
		cmd := exec.CommandContext(ctx, "go", append(args, b.pkgs...)...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	return nil
}

// Proc is one harness-owned OS process with its log file. Start may be
// called again after the process exited (a restart from the same data).
type Proc struct {
	Name string
	Bin  string
	Args []string
	Log  string
	// Stdout, if set, receives stdout lines (the log gets them too).
	Stdout func(line string)
	// Stdin, when set before Start, makes the process read from a pipe the
	// harness writes to with Send.
	Stdin bool
	// Env is added to the harness's environment.
	Env []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
}

// Start starts the process.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Name)
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), p.Env...)
	// Die with the harness, even if it is killed with SIGKILL: no orphaned
	// nodes or workers on a shared machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	var stdout io.ReadCloser
	if p.Stdout != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return err
		}
	} else {
		cmd.Stdout = logf
	}
	var stdin io.WriteCloser
	if p.Stdin {
		if stdin, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.stdin = cmd, exited, stdin
	lineFn := p.Stdout
	go func() {
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64*1024), 4<<20)
			for sc.Scan() {
				lineFn(sc.Text())
			}
			io.Copy(io.Discard, stdout)
		}
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return nil
}

// Send writes a line to the process's stdin.
func (p *Proc) Send(line string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin == nil {
		return fmt.Errorf("%s has no stdin pipe or is not running", p.Name)
	}
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// Pid returns the process id, 0 when not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the current process exits (nil if
// never started).
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Signal sends sig without waiting.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends sig (SIGCONT too, so a stopped process can die of a catchable
// signal) and waits up to timeout for the exit, then SIGKILLs.
func (p *Proc) Kill(sig syscall.Signal, timeout time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// Stopped reports whether the process is in the stopped state (/proc).
func (p *Proc) Stopped() bool {
	pid := p.Pid()
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// WaitStopped polls until the process is stopped, for up to timeout.
func (p *Proc) WaitStopped(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.Stopped() {
			return true
		}
		if !p.Running() {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// Tail returns the last n bytes of the process's log.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// NodeControl is what nemeses need from the cluster under test
// (nemesis.NodeControl). The process faults (kill, pause) are implemented
// here with signals, or by the DockerNet in docker mode; network faults are
// the separate Net interface, so that nemeses can combine both without
// knowing how a fault is realised.
type NodeControl = nm.NodeControl

// Cluster is N leased processes and their gRPC connections.
type Cluster struct {
	procs     []*Proc
	ids       []string
	addrs     []string
	mu        sync.Mutex
	conns     map[string]*grpc.ClientConn
	byID      map[string]int
	startedAt time.Time
	dir       string // holds each node's data dir and log
	net       Net    // nil without network faults
	// rt runs the nodes when they are not the harness's child processes
	// (docker mode); nil: Proc signals.
	rt nodeRuntime
	// lastEpoch is the restore epoch RestoreAll gave last: the next is
	// later, as an operator's clock makes it.
	lastEpoch int64
}

var (
	_ NodeControl = (*Cluster)(nil)
	_ nm.Cluster  = (*Cluster)(nil)
)

// FreeAddrs picks n distinct loopback addresses that nothing listens on
// now. They are released before it returns, so another process may take
// one before its node binds it; StartClusterNet retries with new ones when
// a node says so. The ports come from outside the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) when there is room: an outgoing
// connection's local port, which any process on the host may be handed at
// any moment, is always in that range, and a node restarted on its old
// address must not find it taken by one. Ports bound with 127.0.0.1:0 (what
// tests do) come from that range too.
func FreeAddrs(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo, hi := quietPorts()
	var out []string
	for i := 0; i < n; i++ {
		var l net.Listener
		var err error
		for try := 0; try < 64 && hi > lo; try++ {
			if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))); err == nil {
				break
			}
		}
		if l == nil {
			if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return nil, err
			}
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// quietPorts returns the port range [lo, hi) FreeAddrs picks from: below
// the ephemeral range when at least 2000 ports above 10000 fit there,
// otherwise above it, otherwise empty (lo == hi: use port 0).
func quietPorts() (lo, hi int) {
	elo, ehi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			z, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	switch {
	case elo-10000 >= 2000:
		return 10000, elo
	case 65535-ehi >= 2000:
		return ehi + 1, 65536
	}
	return 0, 0
}

// StartAttempts bounds the starts of a cluster whose node found its
// address taken (see FreeAddrs).
const StartAttempts = 4

// errAddrInUse is a start that failed because a node's address was taken
// between FreeAddrs and the node's bind.
type errAddrInUse struct{ node, addr string }

func (e *errAddrInUse) Error() string {
	return fmt.Sprintf("%s could not listen on %s: address already in use", e.node, e.addr)
}

// addrsHook, when set (tests), sees the addresses each start attempt
// picked before any node starts.
var addrsHook func(addrs []string)

// StartCluster starts n leased nodes bootstrapping one cluster, data and
// logs under dir, and waits up to 30 s for a leader. The nodes talk to
// each other directly on loopback (no Net). In extra, "{id}" is replaced by
// each node's id; env is added to each node's environment.
func StartCluster(ctx context.Context, bin, dir string, n int, extra, env []string) (*Cluster, error) {
	return StartClusterNet(ctx, bin, dir, n, extra, env, "", 0)
}

// StartClusterNet is StartCluster with network faults in mode netMode:
// NetProxy (each node's peer traffic goes through the harness's link
// proxies, --unsafe-peer-route), NetNS (each node in its own network
// namespace, listening on its namespace address) or "" (none). Cluster.Net
// returns the Net; Stop closes it.
//
// When a node exits at start because its address was taken meanwhile (the
// addresses are picked free, then released, then bound by the nodes), the
// whole start is retried on new addresses with fresh data dirs, up to
// StartAttempts times: the nodes' bootstrap configuration names every
// address, so one node cannot move alone.
func StartClusterNet(ctx context.Context, bin, dir string, n int, extra, env []string, netMode string, seed uint64) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startClusterNet(ctx, bin, dir, n, extra, env, netMode, seed)
		var inUse *errAddrInUse
		if err == nil || !errors.As(err, &inUse) || attempt >= StartAttempts || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("start attempt %d of %d: %w", attempt, StartAttempts, err)
			}
			return c, err
		}
		for i := 1; i <= n; i++ {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("n%d", i))); err != nil {
				return nil, err
			}
		}
	}
}

func startClusterNet(ctx context.Context, bin, dir string, n int, extra, env []string, netMode string, seed uint64) (*Cluster, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
	}
	var addrs []string
	var err error
	var nsnet *netns.NSNet
	var pnet *ProxyNet
	switch netMode {
	case NetNS:
		if nsnet, err = netns.NewNSNet(ids); err != nil {
			return nil, err
		}
		for _, id := range ids {
			addrs = append(addrs, nsnet.Addr(id))
		}
	case NetProxy, "":
		if addrs, err = FreeAddrs(n); err != nil {
			return nil, err
		}
		if addrsHook != nil {
			addrsHook(addrs)
		}
		if netMode == NetProxy {
			if pnet, err = NewProxyNet(ids, addrs, seed); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("unknown net mode %q (have %s, %s)", netMode, NetProxy, NetNS)
	}
	c := &Cluster{conns: map[string]*grpc.ClientConn{}, byID: map[string]int{}, addrs: addrs, dir: dir}
	switch {
	case nsnet != nil:
		c.net = nsnet
	case pnet != nil:
		c.net = pnet
	}
	var peers []string
	for i, a := range addrs {
		peers = append(peers, fmt.Sprintf("%s=%s", ids[i], a))
	}
	for i, a := range addrs {
		id := ids[i]
		args := append([]string{
			"--insecure", "--id", id, "--listen", a, "--data-dir", filepath.Join(dir, id),
			"--bootstrap", strings.Join(peers, ","),
		}, expandID(extra, id)...)
		if pnet != nil {
			args = append(args, "--unsafe-peer-route", pnet.Routes(id))
		}
		p := &Proc{Name: id, Bin: bin, Log: filepath.Join(dir, id+".log"), Args: args, Env: env}
		if nsnet != nil {
			p.Bin, p.Args = nsnet.Command(id, bin, args)
		}
		c.procs = append(c.procs, p)
		c.ids = append(c.ids, id)
		c.byID[id] = i
		if err := p.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for lctx.Err() == nil {
		if err := c.addrTaken(); err != nil {
			c.Stop()
			return nil, err
		}
		if c.Leader(lctx) != "" {
			if err := c.addrTaken(); err != nil {
				c.Stop()
				return nil, err
			}
			c.startedAt = time.Now()
			return c, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Stop()
	if err := c.addrTaken(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no leader within 30s; n1's log ends:\n%s", c.procs[0].Tail(2048))
}

// addrTaken returns an *errAddrInUse when a node has exited saying its
// address was in use.
func (c *Cluster) addrTaken() error {
	for i, p := range c.procs {
		if !p.Running() && strings.Contains(p.Tail(4096), "address already in use") {
			return &errAddrInUse{node: c.ids[i], addr: c.addrs[i]}
		}
	}
	return nil
}

func expandID(args []string, id string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "{id}", id)
	}
	return out
}

// Net returns the cluster's network faults, nil when started without.
func (c *Cluster) Net() Net { return c.net }

// Endpoints returns every node's address.
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.addrs...) }

// Nodes implements NodeControl.
func (c *Cluster) Nodes() []string { return append([]string(nil), c.ids...) }

// Proc returns node id's process.
func (c *Cluster) Proc(id string) *Proc { return c.procs[c.byID[id]] }

// Process implements nemesis.Processes.
func (c *Cluster) Process(id string) nm.Process { return c.Proc(id) }

// Dir implements nemesis.Storage: it holds each node's data dir and log.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Status asks node id for its status (1 s timeout).
func (c *Cluster) Status(ctx context.Context, id string) (*api.StatusResponse, error) {
	return c.status(ctx, id, &api.StatusRequest{})
}

// StateStatus asks node id for its status with the state hash (1 s
// timeout).
func (c *Cluster) StateStatus(ctx context.Context, id string) (*api.StatusResponse, error) {
	return c.status(ctx, id, &api.StatusRequest{StateHash: true})
}

func (c *Cluster) status(ctx context.Context, id string, req *api.StatusRequest) (*api.StatusResponse, error) {
	cc, err := c.conn(c.addrs[c.byID[id]])
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return api.NewClusterServiceClient(cc).Status(ctx, req)
}

// Leader implements NodeControl: a running, unpaused node that says it
// leads.
func (c *Cluster) Leader(ctx context.Context) string {
	for _, id := range c.ids {
		p := c.Proc(id)
		if !p.Running() || p.Stopped() || (c.rt != nil && c.rt.paused(id)) {
			continue
		}
		if st, err := c.Status(ctx, id); err == nil && st.State == "leader" {
			return id
		}
	}
	return ""
}

// Kill9 implements NodeControl.
func (c *Cluster) Kill9(id string) error {
	if c.rt != nil {
		return c.rt.kill9(id)
	}
	p := c.Proc(id)
	if !p.Running() {
		return fmt.Errorf("%s is not running", id)
	}
	p.Kill(syscall.SIGKILL, 10*time.Second)
	return nil
}

// Restart implements NodeControl.
func (c *Cluster) Restart(id string) error {
	if c.rt != nil {
		return c.rt.restart(id)
	}
	return c.Proc(id).Start()
}

// Pause implements NodeControl.
func (c *Cluster) Pause(id string) (bool, error) {
	if c.rt != nil {
		return c.rt.pause(id)
	}
	p := c.Proc(id)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return false, err
	}
	return p.WaitStopped(2 * time.Second), nil
}

// Resume implements NodeControl.
func (c *Cluster) Resume(id string) error {
	if c.rt != nil {
		return c.rt.resume(id)
	}
	return c.Proc(id).Signal(syscall.SIGCONT)
}

// Stop kills every node, closes the connections and then the Net (its
// namespaces can go only once the nodes are gone). It may be called twice.
func (c *Cluster) Stop() {
	for _, p := range c.procs {
		p.Kill(syscall.SIGKILL, 10*time.Second)
	}
	if c.net != nil {
		_ = c.net.Close()
	}
	c.mu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
}

// StartKV starts fencedkv on a free loopback port and returns its process
// and base URL.
func StartKV(ctx context.Context, bin, dir string, unfenced bool, env []string) (*Proc, string, error) {
	args := []string{"--listen", "127.0.0.1:0", "--data-file", filepath.Join(dir, "kv.db"), "--log-level", "warn"}
	if unfenced {
		args = append(args, "--unfenced")
	}
	first := make(chan string, 1)
	p := &Proc{Name: "fencedkv", Bin: bin, Args: args, Env: env, Log: filepath.Join(dir, "fencedkv.log"), Stdout: func(l string) {
		select {
		case first <- l:
		default:
		}
	}}
	if err := p.Start(); err != nil {
		return nil, "", err
	}
	select {
	case l := <-first:
		f := strings.Fields(l) // "fencedkv serving on ADDR (...)"
		if len(f) < 4 || f[2] != "on" {
			p.Kill(syscall.SIGKILL, 5*time.Second)
			return nil, "", fmt.Errorf("fencedkv said %q", l)
		}
		return p, "http://" + f[3], nil
	case <-p.Exited():
		return nil, "", fmt.Errorf("fencedkv exited at start: %s", p.Tail(2048))
	case <-time.After(30 * time.Second):
		p.Kill(syscall.SIGKILL, 5*time.Second)
		return nil, "", errors.New("fencedkv did not start within 30s")
	case <-ctx.Done():
		p.Kill(syscall.SIGKILL, 5*time.Second)
		return nil, "", ctx.Err()
	}
}
