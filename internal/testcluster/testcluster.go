// Package testcluster runs clusters for tests: real leased processes on
// loopback, each with its own data dir and log file, started, killed with
// real signals and restarted from its data (Cluster); and real
// cluster.Node-s inside the test's process, with links between them a test
// can cut (Local: Partition, Heal, Leader, WaitApplied). Only tests import
// it.
package testcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/loopback"
)

// Build compiles leased (with the race detector) into a fresh temporary
// directory and returns the binary's path and a cleanup function.
func Build() (bin string, cleanup func(), err error) { return build("-race") }

// BuildForBenchmarks compiles leased without the race detector, for
// measurements.
func BuildForBenchmarks() (bin string, cleanup func(), err error) { return build() }

// BuildWith compiles leased with the given go build flags (e.g. "-tags",
// "plantedbugs").
func BuildWith(flags ...string) (bin string, cleanup func(), err error) { return build(flags...) }

func build(flags ...string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "leasefence-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "leased")
	args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/leasefence/leasefence/cmd/leased")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building leased: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Proc is one leased process.
type Proc struct {
	ID, Addr, DataDir, LogPath string
	Cgroup                     string // a cgroup directory the process runs in; "" for the caller's
	// Args are the flags it is (re)started with; tests may edit them
	// between a Kill and a Start.
	Args []string

	cmd    *exec.Cmd
	exited chan struct{}
}

// Cluster is n leased processes that bootstrapped one cluster.
type Cluster struct {
	t     testing.TB
	bin   string
	Procs []*Proc

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	dialTLS *tls.Config // nil: plaintext

	// procMu guards each Proc's cmd: load goroutines ask Running while the
	// test kills and restarts nodes.
	procMu sync.Mutex
}

// Defaults every node gets before the caller's extra flags: short ttls and
// ticks so tests run fast.
var Defaults = []string{"--insecure", "--min-ttl", "1s", "--skew-margin", "300ms", "--tick", "250ms", "--log-level", "debug"}

// FreeAddrs reserves n loopback addresses (loopback.FreeAddrs), failing
// the test when it cannot.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	out, err := loopback.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Start launches n nodes of a new cluster and waits for a leader. On test
// end every process is killed; when the test failed, the tail of every
// node's log is written to the test log.
func Start(t testing.TB, bin string, n int, extra ...string) *Cluster {
	t.Helper()
	return start(t, bin, n, nil, nil, extra)
}

// StartInCgroups is Start with node i running in the cgroup directory
// cgroups[i] (created by the caller, for instance with a memory limit):
// the process joins it before leased runs, so leased sees the cgroup's
// limits from its first instruction.
func StartInCgroups(t testing.TB, bin string, cgroups []string, extra ...string) *Cluster {
	t.Helper()
	return start(t, bin, len(cgroups), nil, cgroups, extra)
}

// StartTLS is Start for a cluster that runs mutual TLS: extra carries the
// leased --tls-* flags, and the cluster's own connections (Status, Lease,
// Leader...) use dialTLS, which must present a client certificate.
func StartTLS(t testing.TB, bin string, n int, dialTLS *tls.Config, extra ...string) *Cluster {
	t.Helper()
	return start(t, bin, n, dialTLS, nil, extra)
}

func start(t testing.TB, bin string, n int, dialTLS *tls.Config, cgroups []string, extra []string) *Cluster {
	t.Helper()
	addrs := FreeAddrs(t, n)
	var peers []string
	for i, a := range addrs {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, a))
	}
	c := &Cluster{t: t, bin: bin, conns: map[string]*grpc.ClientConn{}, dialTLS: dialTLS}
	base := t.TempDir()
	for i, a := range addrs {
		id := fmt.Sprintf("n%d", i+1)
		p := &Proc{ID: id, Addr: a, DataDir: filepath.Join(base, id), LogPath: filepath.Join(base, id+".log")}
		if cgroups != nil {
			p.Cgroup = cgroups[i]
		}
		defaults := Defaults
		if dialTLS != nil { // a TLS cluster: never plaintext
			defaults = nil
			for _, d := range Defaults {
				if d != "--insecure" {
					defaults = append(defaults, d)
				}
			}
		}
		p.Args = append(append([]string{
			"--id", id, "--listen", a, "--data-dir", p.DataDir,
			"--bootstrap", strings.Join(peers, ","),
		}, defaults...), extra...)
		c.Procs = append(c.Procs, p)
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.Procs {
			c.Kill(i, syscall.SIGKILL)
		}
		c.mu.Lock()
		for _, conn := range c.conns {
			conn.Close()
		}
		c.mu.Unlock()
		if t.Failed() {
			for _, p := range c.Procs {
				b, _ := os.ReadFile(p.LogPath)
				t.Logf("---- %s log (last 4 KiB) ----\n%s", p.ID, tail(b, 4096))
			}
		}
	})
	c.Leader()
	return c
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Endpoints returns every node's address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, p := range c.Procs {
		out = append(out, p.Addr)
	}
	return out
}

// Start (re)starts process i from its data dir.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	p := c.Procs[i]
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, p.Args...)
	if p.Cgroup != "" {
		// The shell joins the cgroup, then becomes leased (same pid).
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, p.Cgroup, c.bin}, p.Args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	c.procMu.Lock()
	p.cmd, p.exited = cmd, exited
	c.procMu.Unlock()
}

// Kill sends sig to process i and waits for it to exit (SIGKILL after 15s).
func (c *Cluster) Kill(i int, sig syscall.Signal) {
	p := c.Procs[i]
	c.procMu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil // from now on, not Running
	c.procMu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// WaitExit waits up to d for process i to exit by itself (a refused
// start) and reports whether it did.
func (c *Cluster) WaitExit(i int, d time.Duration) bool {
	c.procMu.Lock()
	exited := c.Procs[i].exited
	c.procMu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Pid returns the process id of node i (0 when it is not running).
func (c *Cluster) Pid(i int) int {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	if p := c.Procs[i]; p.cmd != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Signal sends sig to process i without waiting (SIGSTOP, SIGCONT).
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	if p := c.Procs[i]; p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Running reports whether process i was started and not killed.
func (c *Cluster) Running(i int) bool {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	return c.Procs[i].cmd != nil
}

func (c *Cluster) conn(addr string) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[addr]; ok {
		return conn
	}
	creds := insecure.NewCredentials()
	if c.dialTLS != nil {
		creds = credentials.NewTLS(c.dialTLS)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns[addr] = conn
	return conn
}

// Lease returns a LeaseService client for node i.
func (c *Cluster) Lease(i int) api.LeaseServiceClient {
	return api.NewLeaseServiceClient(c.conn(c.Procs[i].Addr))
}

// Status asks node i for its status.
func (c *Cluster) Status(i int) (*api.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return api.NewClusterServiceClient(c.conn(c.Procs[i].Addr)).Status(ctx, &api.StatusRequest{})
}

// Leader polls the running nodes until one reports itself leader.
func (c *Cluster) Leader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i := range c.Procs {
			if !c.Running(i) {
				continue
			}
			if st, err := c.Status(i); err == nil && st.State == "leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader within 30s")
	return -1
}

// Any calls f against each running node in turn until one answers with
// something other than Unavailable or DeadlineExceeded, for up to 20s.
func (c *Cluster) Any(f func(api.LeaseServiceClient) error) error {
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		for i := range c.Procs {
			if !c.Running(i) {
				continue
			}
			err = f(c.Lease(i))
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Acquire acquires resource through any node.
func (c *Cluster) Acquire(resource string, ttl time.Duration, reqID string) (*api.AcquireResponse, error) {
	var out *api.AcquireResponse
	err := c.Any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		out, err = l.Acquire(ctx, &api.AcquireRequest{Resource: resource, Holder: "testcluster", Ttl: durationpb.New(ttl), RequestId: reqID})
		return err
	})
	return out, err
}

// Get reads resource (linearizably) through any node.
func (c *Cluster) Get(resource string) (*api.GetResponse, error) {
	var out *api.GetResponse
	err := c.Any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		out, err = l.Get(ctx, &api.GetRequest{Resource: resource})
		return err
	})
	return out, err
}

// Release releases a lease through any node.
func (c *Cluster) Release(id []byte) error {
	return c.Any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := l.Release(ctx, &api.ReleaseRequest{LeaseId: id})
		return err
	})
}

// Renew renews a lease through any node.
func (c *Cluster) Renew(id []byte) (*api.RenewResponse, error) {
	var out *api.RenewResponse
	err := c.Any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		out, err = l.Renew(ctx, &api.RenewRequest{LeaseId: id})
		return err
	})
	return out, err
}

// Cycle acquires and releases resource n times, checking that tokens
// strictly increase, and returns the last token.
func (c *Cluster) Cycle(resource string, n int) uint64 {
	c.t.Helper()
	var last uint64
	for i := 0; i < n; i++ {
		r, err := c.Acquire(resource, 10*time.Second, "")
		if err != nil {
			c.t.Fatalf("acquire %d: %v", i, err)
		}
		if r.Lease.Token <= last {
			c.t.Fatalf("token %d not above %d", r.Lease.Token, last)
		}
		last = r.Lease.Token
		if err := c.Release(r.Lease.Id); err != nil {
			c.t.Fatalf("release %d: %v", i, err)
		}
	}
	return last
}
