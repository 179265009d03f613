// Package e2e runs real leased processes on loopback and kills them with
// real signals. It is test-only: nothing imports it.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

var leasedBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "leasefence-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	leasedBin = filepath.Join(dir, "leased")
	out, err := exec.Command("go", "build", "-race", "-o", leasedBin, "github.com/leasefence/leasefence/cmd/leased").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building leased: %v\n%s", err, out)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one leased process with its own data dir and log file.
type proc struct {
	id, addr, dataDir, logPath string
	args                       []string
	cmd                        *exec.Cmd
	exited                     chan struct{}
}

type cluster struct {
	t     *testing.T
	procs []*proc
	conns map[string]*grpc.ClientConn
}

func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// startCluster starts n leased processes that bootstrap one cluster.
// extra flags go to every node.
func startCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes")
	}
	addrs := freeAddrs(t, n)
	var peers []string
	for i, a := range addrs {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, a))
	}
	c := &cluster{t: t, conns: map[string]*grpc.ClientConn{}}
	base := t.TempDir()
	for i, a := range addrs {
		id := fmt.Sprintf("n%d", i+1)
		p := &proc{
			id: id, addr: a,
			dataDir: filepath.Join(base, id),
			logPath: filepath.Join(base, id+".log"),
		}
		p.args = append([]string{
			"--id", id, "--listen", a, "--data-dir", p.dataDir,
			"--bootstrap", strings.Join(peers, ","),
			"--min-ttl", "1s", "--skew-margin", "300ms", "--tick", "250ms",
			"--log-level", "debug",
		}, extra...)
		c.procs = append(c.procs, p)
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i, syscall.SIGKILL)
		}
		for _, conn := range c.conns {
			conn.Close()
		}
		if t.Failed() {
			for _, p := range c.procs {
				b, _ := os.ReadFile(p.logPath)
				t.Logf("---- %s log (last 4 KiB) ----\n%s", p.id, tail(b, 4096))
			}
		}
	})
	c.leader()
	return c
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// start (re)starts process i with its data dir.
func (c *cluster) start(i int) {
	c.t.Helper()
	p := c.procs[i]
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	p.cmd = exec.Command(leasedBin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { p.cmd.Wait(); logf.Close(); close(p.exited) }()
}

// kill sends sig to process i and waits for it to exit.
func (c *cluster) kill(i int, sig syscall.Signal) {
	p := c.procs[i]
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

func (c *cluster) running(i int) bool { return c.procs[i].cmd != nil }

func (c *cluster) conn(addr string) *grpc.ClientConn {
	if conn, ok := c.conns[addr]; ok {
		return conn
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns[addr] = conn
	return conn
}

func (c *cluster) lease(i int) api.LeaseServiceClient {
	return api.NewLeaseServiceClient(c.conn(c.procs[i].addr))
}

func (c *cluster) status(i int) (*api.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return api.NewClusterServiceClient(c.conn(c.procs[i].addr)).Status(ctx, &api.StatusRequest{})
}

// leader polls the running nodes until one reports itself leader.
func (c *cluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i := range c.procs {
			if !c.running(i) {
				continue
			}
			if st, err := c.status(i); err == nil && st.State == "leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader within 30s")
	return -1
}

// any calls f against each running node in turn until one answers without
// Unavailable, retrying for up to 20s (elections, restarts).
func (c *cluster) any(f func(api.LeaseServiceClient) error) error {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		for i := range c.procs {
			if !c.running(i) {
				continue
			}
			err = f(c.lease(i))
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (c *cluster) acquire(resource string, ttl time.Duration, reqID string) (*api.AcquireResponse, error) {
	var out *api.AcquireResponse
	err := c.any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		out, err = l.Acquire(ctx, &api.AcquireRequest{Resource: resource, Holder: "e2e", Ttl: durationpb.New(ttl), RequestId: reqID})
		return err
	})
	return out, err
}

func (c *cluster) release(id []byte) error {
	return c.any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := l.Release(ctx, &api.ReleaseRequest{LeaseId: id})
		return err
	})
}

func (c *cluster) renew(id []byte) (*api.RenewResponse, error) {
	var out *api.RenewResponse
	err := c.any(func(l api.LeaseServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		out, err = l.Renew(ctx, &api.RenewRequest{LeaseId: id})
		return err
	})
	return out, err
}

// cycle acquires and releases resource n times and returns the last token.
func (c *cluster) cycle(resource string, n int) uint64 {
	c.t.Helper()
	var last uint64
	for i := 0; i < n; i++ {
		r, err := c.acquire(resource, 10*time.Second, "")
		if err != nil {
			c.t.Fatalf("acquire %d: %v", i, err)
		}
		if r.Lease.Token <= last {
			c.t.Fatalf("token %d not above %d", r.Lease.Token, last)
		}
		last = r.Lease.Token
		if err := c.release(r.Lease.Id); err != nil {
			c.t.Fatalf("release %d: %v", i, err)
		}
	}
	return last
}

var errNoLeader = errors.New("no leader")
