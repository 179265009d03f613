// Package deploy_test runs deploy/docker-compose.yml for real: it builds the
// static binaries and the FROM scratch image of deploy/Dockerfile, brings a
// three-node cluster up under a compose project of its own, acquires a lease,
// stops the leader's container, and checks that the next token is higher.
//
// It needs a Docker daemon and docker-compose (or the compose plugin). Where
// they are missing it skips and says why, except under CI=true: the CI
// machine has Docker, so there a missing daemon is a failure.
package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

const (
	// projectPrefix names every compose project and image this test makes,
	// followed by the unix time of the run, so leftovers of a run that was
	// killed before its cleanup can be found and removed.
	projectPrefix = "lfdeploytest"
	imageRepo     = "leasefence-deploytest"
	// leftoverAge is how old a leftover must be before a later run removes
	// it: older than any run of this test, so a run going on at the same
	// time on this shared machine is left alone.
	leftoverAge = 10 * time.Minute
)

var services = []string{"n1", "n2", "n3"}

// compose runs docker-compose (or docker compose) for one project.
type compose struct {
	t       *testing.T
	cmd     []string // "docker-compose" or "docker", "compose"
	file    string
	project string
	env     []string
}

func (c *compose) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append(append(append([]string{}, c.cmd[1:]...), "-f", c.file, "-p", c.project), args...)
	cmd := exec.CommandContext(ctx, c.cmd[0], full...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", c.cmd[0], strings.Join(full, " "), err, out)
	}
	return string(out), nil
}

// unavailable skips the test, or fails it under CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s: the CI machine has a Docker engine, so this test must run there (see .ci/run)", msg)
	}
	t.Skipf("skipping the docker-compose cluster test: %s", msg)
}

// dockerTools checks that the daemon answers and finds a compose tool.
func dockerTools(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable(t, "docker is not installed (no docker on PATH)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		unavailable(t, "the docker daemon is unreachable (docker info: %v: %s)", err, bytes.TrimSpace(out))
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		if exec.CommandContext(ctx, "docker-compose", "version").Run() == nil {
			return []string{"docker-compose"}
		}
	}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	unavailable(t, "neither docker-compose nor the docker compose plugin works")
	return nil
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// removeLeftovers takes down compose projects and images of earlier runs
// that are older than leftoverAge (a run killed by a timeout never reaches
// its cleanup).
func removeLeftovers(t *testing.T, base *compose) {
	projects := map[string]bool{}
	for _, args := range [][]string{
		{"ps", "-a", "--filter", "label=com.docker.compose.project", "--format", `{{.Label "com.docker.compose.project"}}`},
		{"volume", "ls", "--filter", "label=com.docker.compose.project", "--format", `{{.Label "com.docker.compose.project"}}`},
		{"network", "ls", "--filter", "label=com.docker.compose.project", "--format", `{{.Label "com.docker.compose.project"}}`},
	} {
		out, err := exec.Command("docker", args...).Output()
		if err != nil {
			t.Logf("listing leftovers (docker %s): %v", args[0], err)
			continue
		}
		for _, p := range strings.Fields(string(out)) {
			if stale(p) {
				projects[p] = true
			}
		}
	}
	for p := range projects {
		c := *base
		c.project = p
		if _, err := c.run(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Logf("removing leftover project %s: %v", p, err)
		} else {
			t.Logf("removed leftover compose project %s (containers, network, volumes)", p)
		}
	}
	out, err := exec.Command("docker", "images", imageRepo, "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		return
	}
	for _, img := range strings.Fields(string(out)) {
		tag := img[strings.LastIndexByte(img, ':')+1:]
		if stale(projectPrefix + tag) {
			_ = exec.Command("docker", "rmi", "-f", img).Run()
			t.Logf("removed leftover image %s", img)
		}
	}
}

// stale reports whether name, projectPrefix + "<unix seconds>x<pid>", is
// one of this test's and older than leftoverAge.
func stale(name string) bool {
	suffix, ok := strings.CutPrefix(name, projectPrefix)
	if !ok {
		return false
	}
	secs, _, _ := strings.Cut(suffix, "x")
	n, err := strconv.ParseInt(secs, 10, 64)
	return err == nil && time.Since(time.Unix(n, 0)) > leftoverAge
}

// buildImage builds static leased and leasectl into a fresh build context
// laid out as deploy/Dockerfile expects (the same steps as `make image`) and
// builds the image under tag.
func buildImage(t *testing.T, root, tag string) {
	t.Helper()
	ctxDir := t.TempDir()
	rootfs := filepath.Join(ctxDir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building the image needs the go command: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", rootfs+string(filepath.Separator), "./cmd/leased", "./cmd/leasectl")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building static binaries: %v\n%s", err, out)
	}
	df, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}

// node is one compose service as the test reaches it: its published port
// on 127.0.0.1.
type node struct {
	name    string
	conn    *grpc.ClientConn
	stopped bool
}

func (n *node) status() (*api.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return api.NewClusterServiceClient(n.conn).Status(ctx, &api.StatusRequest{})
}

// waitLeader polls the running nodes until one reports itself leader and
// is not excluded, and returns its id.
func waitLeader(t *testing.T, nodes []*node, exclude string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.stopped {
				continue
			}
			st, err := n.status()
			if err != nil {
				last = err
				continue
			}
			if st.State == "leader" && st.Id != exclude {
				return st.Id
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader (other than %q) within %v; last error: %v", exclude, within, last)
	return ""
}

// acquire asks the running nodes in turn (followers forward to the leader)
// until one grants, retrying with one request id while the cluster has no
// leader, so a retry after a lost answer cannot yield a second lease.
func acquire(t *testing.T, nodes []*node, resource, scope string) *api.Lease {
	t.Helper()
	req := &api.AcquireRequest{
		Resource:  resource,
		Scope:     scope,
		Holder:    "compose-test",
		Ttl:       durationpb.New(10 * time.Second),
		RequestId: fmt.Sprintf("compose-test-%s-%d", resource, time.Now().UnixNano()),
	}
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.stopped {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var r *api.AcquireResponse
			r, err = api.NewLeaseServiceClient(n.conn).Acquire(ctx, req)
			cancel()
			if err == nil {
				return r.Lease
			}
			if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
				t.Fatalf("acquire %s on %s: %v", resource, n.name, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("acquire %s: no grant within 30s: %v", resource, err)
	return nil
}

func TestComposeClusterFailoverKeepsTokensIncreasing(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the docker-compose cluster test in -short mode (it builds an image and runs three containers)")
	}
	tool := dockerTools(t)
	start := time.Now()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%dx%d", start.Unix(), os.Getpid())
	tag := imageRepo + ":" + suffix
	ports := freePorts(t, len(services))
	c := &compose{t: t, cmd: tool, file: filepath.Join(root, "deploy", "docker-compose.yml"), project: projectPrefix + suffix}
	c.env = []string{"LEASEFENCE_IMAGE=" + tag}
	for i, s := range services {
		c.env = append(c.env, fmt.Sprintf("LEASEFENCE_%s_PORT=%d", strings.ToUpper(s), ports[i]))
	}
	removeLeftovers(t, c)

	buildImage(t, root, tag)
	t.Logf("built %s in %v", tag, time.Since(start).Round(time.Millisecond))

	t.Cleanup(func() {
		if t.Failed() {
			if out, err := c.run(time.Minute, "logs", "--no-color", "--tail", "80"); err == nil {
				t.Logf("---- container logs (last 80 lines each) ----\n%s", out)
			}
		}
		if out, err := c.run(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("tearing down the compose project: %v\n%s", err, out)
		}
	})
	if _, err := c.run(2*time.Minute, "up", "-d"); err != nil {
		t.Fatal(err)
	}

	var nodes []*node
	for i, s := range services {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", ports[i]), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		nodes = append(nodes, &node{name: s, conn: conn})
	}
	byName := func(id string) *node {
		for _, n := range nodes {
			if n.name == id {
				return n
			}
		}
		t.Fatalf("leader id %q is not a compose service (%v)", id, services)
		return nil
	}

	up := time.Now()
	first := waitLeader(t, nodes, "", 45*time.Second)
	st, err := byName(first).status()
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, m := range st.Members {
		members = append(members, m.Id+"="+m.Addr)
	}
	sort.Strings(members)
	if got, want := strings.Join(members, ","), "n1=n1:7001,n2=n2:7001,n3=n3:7001"; got != want {
		t.Fatalf("members %s, want %s", got, want)
	}
	t.Logf("leader %s after %v", first, time.Since(up).Round(time.Millisecond))

	const scope = "deploy/compose"
	l1 := acquire(t, nodes, "jobs/a", scope)
	t.Logf("acquired jobs/a: token %d", l1.Token)

	// docker stop: SIGTERM, so the leader hands leadership over first.
	stop := time.Now()
	if _, err := c.run(time.Minute, "stop", "-t", "20", first); err != nil {
		t.Fatal(err)
	}
	byName(first).stopped = true
	second := waitLeader(t, nodes, first, 30*time.Second)
	t.Logf("stopped %s; new leader %s after %v", first, second, time.Since(stop).Round(time.Millisecond))

	l2 := acquire(t, nodes, "jobs/b", scope)
	if l2.Token <= l1.Token {
		t.Fatalf("after the leader's container stopped: token %d, earlier %d", l2.Token, l1.Token)
	}
	t.Logf("acquired jobs/b in the same scope: token %d > %d", l2.Token, l1.Token)

	// The lease granted before the failover survived it: release it, then
	// the same resource is granted again with a higher token still.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rel, err := api.NewLeaseServiceClient(byName(second).conn).Release(ctx, &api.ReleaseRequest{LeaseId: l1.Id})
	cancel()
	if err != nil || !rel.Released {
		t.Fatalf("release of the pre-failover lease: %v (released=%v)", err, rel.GetReleased())
	}
	l3 := acquire(t, nodes, "jobs/a", scope)
	if l3.Token <= l2.Token {
		t.Fatalf("re-acquire of jobs/a: token %d, earlier %d", l3.Token, l2.Token)
	}
	t.Logf("released jobs/a and acquired it again: token %d", l3.Token)

	// The stopped node comes back from its volume and rejoins as a member.
	if _, err := c.run(time.Minute, "start", first); err != nil {
		t.Fatal(err)
	}
	byName(first).stopped = false
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := byName(first).status()
		if err == nil && st.LeaderId != "" && st.AppliedIndex > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted %s does not see a leader within 30s: %v", first, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	l4 := acquire(t, []*node{byName(first)}, "jobs/c", scope)
	if l4.Token <= l3.Token {
		t.Fatalf("through the restarted node: token %d, earlier %d", l4.Token, l3.Token)
	}
	t.Logf("restarted %s rejoined; token through it %d; whole test %v", first, l4.Token, time.Since(start).Round(time.Millisecond))
}
