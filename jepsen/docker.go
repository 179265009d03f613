package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/internal/netns"
	"github.com/leasefence/leasefence/jepsen/history"
)

// NetDocker is the container mode of Config.NetMode (cmd/jepsen --net
// docker): the nodes run as containers of the project's image, the
// artifact users deploy (deploy/Dockerfile), on a private Docker network.
const NetDocker = "docker"

// DefaultDockerImage is the image `make image` builds.
const DefaultDockerImage = "leasefence:dev"

// DockerNemeses are the nemeses docker mode realises; Run leaves the others
// out and says so. Process faults are Docker's own (docker kill -s KILL,
// docker pause, docker start of the same container and volume); network
// faults are iptables rules in the container's network namespace, entered
// from the host (the image is scratch: it has no iptables). Not here:
// net-slow (the kernel has no netem), the clock nemeses (the node's clock
// file is the host's), and those that rewrite a node's data dir or
// command line (storage, member, member-unreachable, restore,
// rolling-restart).
var DockerNemeses = []string{history.NemKill, history.NemKillLeader, history.NemPause, history.NemPauseLeader, history.NemClientPause, history.NemSnapshot,
	history.NemPartitionLeader, history.NemPartitionHalves, history.NemPartitionRing, history.NemPartitionBridge, history.NemPartitionOneway, history.NemNetFlaky,
	history.NemSilentLeader, history.NemKillMinority, history.NemPartitionKill}

// ErrNoDocker is returned by NewDockerNet when no Docker engine answers.
var ErrNoDocker = errors.New("jepsen: docker mode needs a Docker engine (`docker info` failed)")

// dockerLabel marks every object docker mode creates; its value is the
// harness's pid.
const dockerLabel = "leasefence.jepsen"

// dockerPrefix starts the name of every container, volume and network
// docker mode creates: lfjd-<harness pid>[-<node id>].
const dockerPrefix = "lfjd-"

var dockerNameRe = regexp.MustCompile(`^lfjd-(\d+)(?:-|$)`)

// dockerNames are the Docker objects of one harness (pid): its network and,
// per node id, a container and a volume of the same name.
type dockerNames struct{ pid int }

func (d dockerNames) network() string { return fmt.Sprintf("%s%d", dockerPrefix, d.pid) }
func (d dockerNames) container(id string) string {
	return fmt.Sprintf("%s%d-%s", dockerPrefix, d.pid, id)
}
func (d dockerNames) volume(id string) string { return d.container(id) }

// dockerStale reports whether name is a docker-mode object of a harness
// that is no longer running (alive says whether a pid runs). Names of
// running harnesses, and names docker mode never makes, are not stale.
func dockerStale(name string, alive func(int) bool) bool {
	m := dockerNameRe.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && pid > 0 && !alive(pid)
}

// dockerCreateArgs is the `docker create` command line of one node: the
// image's own entrypoint, environment (LEASEFENCE_LISTEN=0.0.0.0:7001,
// LEASEFENCE_DATA_DIR=/data) and user, a named volume on /data, a fixed
// address on the harness's network, and the per-node flags the deployment
// passes (deploy/docker-compose.yml): --id, --advertise, --bootstrap.
func dockerCreateArgs(names dockerNames, id, ip, image, bootstrap string, extra []string) []string {
	args := []string{"create", "--name", names.container(id), "--hostname", id,
		"--label", fmt.Sprintf("%s=%d", dockerLabel, names.pid),
		"--network", names.network(), "--ip", ip,
		"-v", names.volume(id) + ":/data",
		image,
		"--insecure", "--id", id, "--advertise", fmt.Sprintf("%s:%d", ip, netns.NSPort), "--bootstrap", bootstrap}
	return append(args, expandID(extra, id)...)
}

// dockerBin is the docker client; tests may point it elsewhere.
var dockerBin = "docker"

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, dockerBin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// dockerDo runs docker with a 60 s bound (a stuck engine must not hang a
// run or its cleanup).
func dockerDo(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return docker(ctx, args...)
}

// CleanupStaleDocker removes the containers, volumes and networks that a
// harness which is no longer running left behind (their names carry its
// pid, see dockerNames). Those of a running harness are never touched. It
// returns what it could not remove.
func CleanupStaleDocker() error {
	var errs []error
	list := func(args ...string) []string {
		out, err := dockerDo(args...)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		var stale []string
		for _, n := range strings.Fields(out) {
			if dockerStale(n, netns.Alive) {
				stale = append(stale, n)
			}
		}
		return stale
	}
	// Containers first: a volume or network in use cannot go.
	if c := list("ps", "-a", "--filter", "name="+dockerPrefix, "--format", "{{.Names}}"); len(c) > 0 {
		_, err := dockerDo(append([]string{"rm", "-f", "-v"}, c...)...)
		errs = append(errs, err)
	}
	if v := list("volume", "ls", "-q", "--filter", "name="+dockerPrefix); len(v) > 0 {
		_, err := dockerDo(append([]string{"volume", "rm", "-f"}, v...)...)
		errs = append(errs, err)
	}
	for _, n := range list("network", "ls", "--filter", "name="+dockerPrefix, "--format", "{{.Name}}") {
		_, err := dockerDo("network", "rm", n)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// nodeRuntime runs nodes other than as the harness's child processes;
// Cluster routes its NodeControl methods to it when set.
type nodeRuntime interface {
	kill9(id string) error
	restart(id string) error
	pause(id string) (bool, error)
	resume(id string) error
	paused(id string) bool
}

// DockerNet is docker mode: Net for the network faults and the runtime of
// the node containers. Each node is a container lfjd-<pid>-<id> of the
// image, with the named volume lfjd-<pid>-<id> on /data, at a fixed
// address 10.214.K.(11+i) of the bridge network lfjd-<pid>; the harness,
// its fencedkv and workers run on the host and reach the containers at
// those addresses directly (the host holds the bridge's .1). A node's log
// is the output of `docker start -a` (its Proc), so Proc.Tail and the
// node's log file work as in the other modes.
//
// Network faults are iptables rules in the container's namespace (nsenter
// from the host), on node addresses only, exactly as in namespace mode
// (netns.NSNet): Partition DROPs in chain LFJ-PART, Flaky resets in LFJ-FLAKY,
// Silence drops everything but loopback. A restarted container gets a new
// namespace: restart sets up the chains again and puts back the faults in
// place. Slow is refused (no netem).
//
// Close kills the containers, copies each node's /data out to
// <dir>/<id> (where DumpLogs reads the Raft logs), and removes the
// containers, volumes and network. NewDockerNet first removes what a killed
// harness left behind (CleanupStaleDocker).
type DockerNet struct {
	names  dockerNames
	image  string
	dir    string
	prefix string // "10.214.K."
	ids    []string
	ip     map[string]string

	mu       sync.Mutex
	procs    map[string]*Proc
	grudge   map[string][]string
	flaky    float64
	frozen   map[string]bool
	silenced map[string]bool
	closed   bool
}

var (
	_ Net         = (*DockerNet)(nil)
	_ nodeRuntime = (*DockerNet)(nil)
)

// NewDockerNet creates the network and volumes for ids (no containers
// yet: StartClusterDocker creates them). dir receives the nodes' logs and,
// on Close, their data.
func NewDockerNet(image, dir string, ids []string) (*DockerNet, error) {
	if _, err := exec.LookPath(dockerBin); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	if _, err := dockerDo("info", "--format", "{{.ServerVersion}}"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	if _, err := dockerDo("image", "inspect", "--format", "{{.Id}}", image); err != nil {
		return nil, fmt.Errorf("docker mode: image %s not found (build it with `make image IMAGE=%s`; nothing is pulled): %w", image, image, err)
	}
	if err := CleanupStaleDocker(); err != nil {
		return nil, fmt.Errorf("docker mode: removing a stale run's leftovers: %w", err)
	}
	d := &DockerNet{names: dockerNames{pid: os.Getpid()}, image: image, dir: dir, ids: slices.Clone(ids),
		ip: map[string]string{}, procs: map[string]*Proc{}, frozen: map[string]bool{}, silenced: map[string]bool{}}
	label := fmt.Sprintf("%s=%d", dockerLabel, d.names.pid)
	used := netns.Output(netns.IPBin, "-4", "route")
	var lastErr error
	for k := 0; k < 256 && d.prefix == ""; k++ {
		p := fmt.Sprintf("10.214.%d.", k)
		if strings.Contains(used, p) {
			continue
		}
		// Docker refuses a subnet that overlaps one of its networks; try
		// the next.
		_, lastErr = dockerDo("network", "create", "--driver", "bridge", "--subnet", p+"0/24", "--label", label, d.names.network())
		if lastErr == nil {
			d.prefix = p
		}
	}
	if d.prefix == "" {
		return nil, fmt.Errorf("docker mode: no free 10.214.K.0/24 for the network: %v", lastErr)
	}
	for i, id := range ids {
		d.ip[id] = fmt.Sprintf("%s%d", d.prefix, 11+i)
		if _, err := dockerDo("volume", "create", "--label", label, d.names.volume(id)); err != nil {
			d.Close()
			return nil, fmt.Errorf("docker mode: %w", err)
		}
	}
	return d, nil
}

// Addr returns node id's address on the network (clients and peers).
func (d *DockerNet) Addr(id string) string { return fmt.Sprintf("%s:%d", d.ip[id], netns.NSPort) }

// create creates node id's container with the node flags extra and
// returns its Proc (`docker start -a`: starting it starts the container
// and follows its output into the log).
func (d *DockerNet) create(id, bootstrap string, extra []string) (*Proc, error) {
	if _, err := dockerDo(dockerCreateArgs(d.names, id, d.ip[id], d.image, bootstrap, extra)...); err != nil {
		return nil, err
	}
	p := &Proc{Name: id, Bin: dockerBin, Args: []string{"start", "-a", d.names.container(id)}, Log: filepath.Join(d.dir, id+".log")}
	d.mu.Lock()
	d.procs[id] = p
	d.mu.Unlock()
	return p, nil
}

func (d *DockerNet) known(id string) bool { _, ok := d.ip[id]; return ok }

// pid returns the host pid of the container's init (the node), 0 when it
// does not run.
func (d *DockerNet) pid(id string) int {
	out, err := dockerDo("inspect", "--format", "{{.State.Pid}}", d.names.container(id))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(out)
	return pid
}

// rules are the iptables faults, entering a container's namespace with
// nsenter through the pid of its init.
func (d *DockerNet) rules() netns.Rules {
	return netns.Rules{IDs: d.ids, IP: d.ip, In: func(id string) ([]string, error) {
		pid := d.pid(id)
		if pid == 0 {
			return nil, fmt.Errorf("docker mode: %s is not running", id)
		}
		return []string{"nsenter", "-t", strconv.Itoa(pid), "-n"}, nil
	}}
}

// setupNS makes the fault chains in a fresh namespace of id and puts back
// the faults in place. Called with d.mu held.
func (d *DockerNet) setupNS(id string) error {
	r := d.rules()
	errs := r.Chains(id)
	errs = append(errs, r.Drop(id, d.grudge[id])...)
	errs = append(errs, r.FlakyFor(id, d.flaky)...)
	if d.silenced[id] {
		errs = append(errs, r.Silence(id, true))
	}
	return errors.Join(errs...)
}

// kill9 implements nodeRuntime: SIGKILL through the engine.
func (d *DockerNet) kill9(id string) error {
	p := d.proc(id)
	if p == nil || !p.Running() {
		return fmt.Errorf("%s is not running", id)
	}
	_, err := dockerDo("kill", "--signal", "KILL", d.names.container(id))
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
	}
	p.Kill(syscall.SIGKILL, 5*time.Second) // the attached client, if it lingers
	d.mu.Lock()
	d.frozen[id] = false
	d.mu.Unlock()
	return err
}

// restart implements nodeRuntime: the same container (its volume, its
// address) starts again; once it runs, its new namespace gets the fault
// chains and the faults in place.
func (d *DockerNet) restart(id string) error {
	p := d.proc(id)
	if p == nil {
		return fmt.Errorf("docker mode: no node %q", id)
	}
	if d.pid(id) != 0 {
		return fmt.Errorf("docker mode: %s already running", id)
	}
	if err := p.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if d.pid(id) != 0 {
			break
		}
		if !p.Running() {
			return fmt.Errorf("docker mode: %s exited at start: %s", id, p.Tail(1024))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("docker mode: %s not running 30s after docker start", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.setupNS(id)
}

// pause implements nodeRuntime: docker pause freezes every process of the
// container (cgroup freezer), a frozen host.
func (d *DockerNet) pause(id string) (bool, error) {
	if _, err := dockerDo("pause", d.names.container(id)); err != nil {
		return false, err
	}
	d.mu.Lock()
	d.frozen[id] = true
	d.mu.Unlock()
	out, err := dockerDo("inspect", "--format", "{{.State.Paused}}", d.names.container(id))
	return err == nil && out == "true", nil
}

// resume implements nodeRuntime.
func (d *DockerNet) resume(id string) error {
	_, err := dockerDo("unpause", d.names.container(id))
	d.mu.Lock()
	d.frozen[id] = false
	d.mu.Unlock()
	return err
}

// paused implements nodeRuntime.
func (d *DockerNet) paused(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frozen[id]
}

func (d *DockerNet) proc(id string) *Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.procs[id]
}

// Partition implements Net.
func (d *DockerNet) Partition(grudge map[string][]string) error {
	if err := netns.CheckGrudge(grudge, d.known); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	d.grudge, err = d.rules().Partition(grudge)
	return err
}

// Slow implements Net: refused, docker mode has no packet delay.
func (d *DockerNet) Slow(delay, jitter time.Duration) error {
	if delay == 0 && jitter == 0 {
		return nil
	}
	return errors.New("docker mode cannot delay packets (no netem qdisc); use proxy mode for net-slow")
}

// Flaky implements Net as namespace mode does (netns.NSNet.Flaky).
func (d *DockerNet) Flaky(p float64) error {
	if p < 0 || p > 1 {
		return fmt.Errorf("docker mode: probability %v outside [0, 1]", p)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.rules().Flaky(p)
	d.flaky = p
	return err
}

// Silence (on) drops every packet into and out of id's container but its
// loopback, clients' included, without a reset (as netns.NSNet.Silence); off
// lifts it. Heal does not touch it.
func (d *DockerNet) Silence(id string, on bool) error {
	if !d.known(id) {
		return fmt.Errorf("docker mode: no node %q", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.silenced[id] == on {
		return nil
	}
	d.silenced[id] = on
	return d.rules().Silence(id, on)
}

// Heal implements Net.
func (d *DockerNet) Heal() error { return errors.Join(d.Partition(nil), d.Flaky(0)) }

// Describe implements Net.
func (d *DockerNet) Describe() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := fmt.Sprintf("docker mode (image %s, network %s, %s0/24); %s (iptables DROP in the receiver's container namespace)",
		d.image, d.names.network(), d.prefix, netns.GrudgeString(d.grudge))
	return s + netns.FlakyString(d.flaky)
}

// Stats implements Net from the rules' packet counters (a restarted
// container's counters start again from zero; a stopped one counts nothing).
func (d *DockerNet) Stats() NetStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rules().Stats()
}

// Close implements Net: it stops the containers (SIGKILL, after unpausing),
// copies each node's /data to <dir>/<id>, and removes the containers,
// volumes and network. Safe to call twice; every step runs even when an
// earlier one failed.
func (d *DockerNet) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	procs := d.procs
	d.mu.Unlock()
	var errs []error
	var ctrs []string
	for _, id := range d.ids {
		if _, ok := procs[id]; !ok {
			continue
		}
		c := d.names.container(id)
		ctrs = append(ctrs, c)
		_, _ = dockerDo("unpause", c)
		_, _ = dockerDo("kill", "--signal", "KILL", c)
		if _, err := os.Stat(filepath.Join(d.dir, id)); os.IsNotExist(err) {
			if _, err := dockerDo("cp", c+":/data", filepath.Join(d.dir, id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range procs {
		p.Kill(syscall.SIGKILL, 5*time.Second)
	}
	if len(ctrs) > 0 {
		_, err := dockerDo(append([]string{"rm", "-f", "-v"}, ctrs...)...)
		errs = append(errs, err)
	}
	if out, _ := dockerDo("volume", "ls", "-q", "--filter", "label="+fmt.Sprintf("%s=%d", dockerLabel, d.names.pid)); out != "" {
		_, err := dockerDo(append([]string{"volume", "rm", "-f"}, strings.Fields(out)...)...)
		errs = append(errs, err)
	}
	if out, _ := dockerDo("network", "ls", "-q", "--filter", "name="+d.names.network()); out != "" {
		_, err := dockerDo("network", "rm", d.names.network())
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StartClusterDocker starts n nodes as containers of image (docker mode,
// DockerNet), logs and (after Stop) data under dir, and waits up to 30 s
// for a leader. In extra, "{id}" is replaced by each node's id.
func StartClusterDocker(ctx context.Context, image, dir string, n int, extra []string) (*Cluster, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
	}
	d, err := NewDockerNet(image, dir, ids)
	if err != nil {
		return nil, err
	}
	c := &Cluster{conns: map[string]*grpc.ClientConn{}, byID: map[string]int{}, dir: dir, net: d, rt: d}
	var peers []string
	for _, id := range ids {
		c.addrs = append(c.addrs, d.Addr(id))
		peers = append(peers, id+"="+d.Addr(id))
	}
	for i, id := range ids {
		p, err := d.create(id, strings.Join(peers, ","), extra)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("docker mode: %w", err)
		}
		c.procs = append(c.procs, p)
		c.ids = append(c.ids, id)
		c.byID[id] = i
	}
	for _, id := range ids {
		if err := d.restart(id); err != nil {
			c.Stop()
			return nil, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for lctx.Err() == nil {
		if c.Leader(lctx) != "" {
			c.startedAt = time.Now()
			return c, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Stop()
	return nil, fmt.Errorf("docker mode: no leader within 30s; n1's log ends:\n%s", c.procs[0].Tail(2048))
}
