// Package netns builds the harness's namespace network (jepsen's --net
// netns): a Linux network namespace per node joined by a bridge, with
// partitions, flaky links, delay and silence as iptables and tc rules
// inside a node's namespace. Root only. It lives outside the jepsen module
// because internal/perf's silent-leader benchmark uses it too.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NSNet is the namespace mode of Net (root only): one Linux network
// namespace per node, named lfj-<harness pid>-<node id>, each joined by a
// veth pair to a bridge lfjbr<pid> in the root namespace. The bridge has
// the subnet's .1 address, so clients in the root namespace (workers,
// watcher, harness) reach every node directly; nodes reach each other
// through the bridge. Faults are iptables rules inside the victim's
// namespace, on node addresses only, so they never touch clients:
//
//   - Partition: DROP in chain LFJ-PART of b's INPUT for each a that b does
//     not receive from (packets lost, TCP retransmits until heal);
//   - Flaky(p): in chain LFJ-FLAKY, a SYN from a peer is answered with a
//     reset with probability p (connection refused), and any other peer
//     packet with probability p/100 (an open connection reset);
//   - Slow: needs the netem qdisc (tc); where the kernel lacks it, Slow
//     returns an error saying so.
//
// Because the hosts run with br_netfilter (bridged frames pass the root
// namespace's FORWARD chain, whose policy may be DROP), the root namespace
// gets one rule `FORWARD -i BR -o BR -j ACCEPT`, removed on Close.
// NewNSNet first removes what an earlier, killed harness left behind
// (namespaces, bridges, veths and that rule whose pid no longer runs).
type NSNet struct {
	pid    int
	bridge string
	prefix string // "10.213.K."
	ids    []string
	ns     map[string]string // node id -> namespace
	ip     map[string]string // node id -> address

	mu     sync.Mutex
	grudge map[string][]string
	delay  time.Duration
	jitter time.Duration
	flaky  float64
	closed bool
}

// NSPort is the port every node listens on inside its namespace.
const NSPort = 7001

// Paths of the tools the namespace network runs (docker mode uses them too).
var (
	IPBin       = "/usr/sbin/ip"
	IptablesBin = "/usr/sbin/iptables"
	TCBin       = "/usr/sbin/tc"
)

// ErrNotRoot is returned by NewNSNet when the harness is not root.
var ErrNotRoot = errors.New("jepsen: namespace mode needs root")

// Run runs bin with args and returns its output in the error when it fails.
func Run(bin string, args ...string) error {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Output runs bin with args and returns its stdout ("" on error).
func Output(bin string, args ...string) string {
	out, _ := exec.Command(bin, args...).Output()
	return string(out)
}

// NewNSNet creates the namespaces, veths and bridge for ids. The caller
// starts node i with Command(ids[i], ...) listening on Addr(ids[i]).
func NewNSNet(ids []string) (*NSNet, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	CleanupStaleNS()
	n := &NSNet{pid: os.Getpid(), ids: append([]string(nil), ids...), ns: map[string]string{}, ip: map[string]string{}}
	n.bridge = fmt.Sprintf("lfjbr%d", n.pid)
	k, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n.prefix = fmt.Sprintf("10.213.%d.", k)
	fail := func(err error) (*NSNet, error) {
		n.Close()
		return nil, fmt.Errorf("namespace mode: %w", err)
	}
	steps := [][]string{
		{IPBin, "link", "add", n.bridge, "type", "bridge"},
		{IPBin, "addr", "add", n.prefix + "1/24", "dev", n.bridge},
		{IPBin, "link", "set", n.bridge, "up"},
		{IptablesBin, "-I", "FORWARD", "1", "-i", n.bridge, "-o", n.bridge, "-j", "ACCEPT"},
	}
	for i, id := range ids {
		ns := fmt.Sprintf("lfj-%d-%s", n.pid, id)
		host, peer := fmt.Sprintf("lfj%dh%d", n.pid, i), fmt.Sprintf("lfj%dp%d", n.pid, i)
		n.ns[id], n.ip[id] = ns, fmt.Sprintf("%s%d", n.prefix, 11+i)
		in := func(args ...string) []string { return append([]string{IPBin, "netns", "exec", ns}, args...) }
		steps = append(steps,
			[]string{IPBin, "netns", "add", ns},
			[]string{IPBin, "link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{IPBin, "link", "set", peer, "netns", ns},
			[]string{IPBin, "link", "set", host, "master", n.bridge, "up"},
			in(IPBin, "link", "set", peer, "name", "eth0"),
			in(IPBin, "addr", "add", n.ip[id]+"/24", "dev", "eth0"),
			in(IPBin, "link", "set", "eth0", "up"),
			in(IPBin, "link", "set", "lo", "up"),
		)
	}
	for _, s := range steps {
		if err := Run(s[0], s[1:]...); err != nil {
			return fail(err)
		}
	}
	for _, id := range ids {
		if err := errors.Join(n.rules().Chains(id)...); err != nil {
			return fail(err)
		}
	}
	return n, nil
}

// freeSubnet picks K such that 10.213.K.0/24 appears in no address or
// route of the root namespace.
func freeSubnet() (int, error) {
	used := Output(IPBin, "-4", "-o", "addr") + Output(IPBin, "-4", "route")
	for k := 0; k < 256; k++ {
		if !strings.Contains(used, fmt.Sprintf("10.213.%d.", k)) {
			return k, nil
		}
	}
	return 0, errors.New("namespace mode: every 10.213.K.0/24 is in use")
}

var staleRe = regexp.MustCompile(`lfj(?:-|br)?(\d+)`)

// Alive reports whether process pid exists.
func Alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// CleanupStaleNS removes namespaces, bridges, veths and FORWARD rules that
// a harness which is no longer running left behind (names carry its pid).
// It never touches those of a running harness.
func CleanupStaleNS() {
	stale := func(name string) bool {
		m := staleRe.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		return err == nil && !Alive(pid)
	}
	for _, l := range strings.Split(Output(IPBin, "netns", "list"), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], "lfj-") && stale(f[0]) {
			_ = Run(IPBin, "netns", "del", f[0])
		}
	}
	for _, l := range strings.Split(Output(IPBin, "-o", "link"), "\n") {
		f := strings.Fields(l) // "7: lfjbr123: <...>" or "8: lfj123h0@if2: ..."
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, "lfj") && stale(name) {
			_ = Run(IPBin, "link", "del", name)
		}
	}
	for _, l := range strings.Split(Output(IptablesBin, "-S", "FORWARD"), "\n") {
		if !strings.HasPrefix(l, "-A FORWARD -i lfjbr") {
			continue
		}
		f := strings.Fields(l)
		if stale(f[3]) {
			_ = Run(IptablesBin, append([]string{"-D"}, f[1:]...)...)
		}
	}
}

// Addr returns the address node id listens on (its namespace's).
func (n *NSNet) Addr(id string) string { return fmt.Sprintf("%s:%d", n.ip[id], NSPort) }

// Command returns the program and arguments that run bin args inside id's
// namespace. `ip netns exec` execs bin, so the process is bin's own:
// signals, /proc and Pdeathsig apply to it.
func (n *NSNet) Command(id, bin string, args []string) (string, []string) {
	return IPBin, append([]string{"netns", "exec", n.ns[id], bin}, args...)
}

func (n *NSNet) known(id string) bool { _, ok := n.ns[id]; return ok }

// rules are the iptables faults, entering a namespace with `ip netns exec`.
func (n *NSNet) rules() Rules {
	return Rules{IDs: n.ids, IP: n.ip, In: func(id string) ([]string, error) {
		return []string{IPBin, "netns", "exec", n.ns[id]}, nil
	}}
}

// Partition implements Net.
func (n *NSNet) Partition(grudge map[string][]string) error {
	if err := CheckGrudge(grudge, n.known); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var err error
	n.grudge, err = n.rules().Partition(grudge)
	return err
}

// Silence (on) drops every packet into and out of id's namespace but its
// loopback, clients' included, without a reset: the node vanishes from
// the network as a crashed host or a pulled cable makes it, while its
// process runs on. Silence(id, false) lifts it; Heal does not touch it.
func (n *NSNet) Silence(id string, on bool) error {
	if !n.known(id) {
		return fmt.Errorf("namespace mode: no node %q", id)
	}
	return n.rules().Silence(id, on)
}

// Slow implements Net with netem, if the kernel has it.
func (n *NSNet) Slow(delay, jitter time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, id := range n.ids {
		_ = Run(IPBin, "netns", "exec", n.ns[id], TCBin, "qdisc", "del", "dev", "eth0", "root")
		if delay == 0 && jitter == 0 {
			continue
		}
		err := Run(IPBin, "netns", "exec", n.ns[id], TCBin, "qdisc", "add", "dev", "eth0", "root", "netem",
			"delay", fmt.Sprintf("%dus", delay.Microseconds()), fmt.Sprintf("%dus", jitter.Microseconds()))
		if err != nil {
			return fmt.Errorf("namespace mode cannot delay packets (the kernel has no netem qdisc?): %w", err)
		}
	}
	n.delay, n.jitter = delay, jitter
	return errors.Join(errs...)
}

// Flaky implements Net.
func (n *NSNet) Flaky(p float64) error {
	if p < 0 || p > 1 {
		return fmt.Errorf("namespace mode: probability %v outside [0, 1]", p)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.rules().Flaky(p)
	n.flaky = p
	return err
}

// Heal implements Net.
func (n *NSNet) Heal() error {
	err := errors.Join(n.Partition(nil), n.Flaky(0))
	if n.delay > 0 || n.jitter > 0 {
		err = errors.Join(err, n.Slow(0, 0))
	}
	return err
}

// Describe implements Net.
func (n *NSNet) Describe() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := fmt.Sprintf("namespace mode (bridge %s, %s0/24); %s (iptables DROP in the receiver's namespace)", n.bridge, n.prefix, GrudgeString(n.grudge))
	if n.delay > 0 || n.jitter > 0 {
		s += fmt.Sprintf("; netem delay %v jitter %v", n.delay, n.jitter)
	}
	return s + FlakyString(n.flaky)
}

// Stats implements Net from the packet counters of the iptables rules.
func (n *NSNet) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rules().Stats()
}

// Close implements Net: it deletes the namespaces (with their rules and
// veths), the bridge and the FORWARD rule. The nodes must have exited:
// a namespace lives on while a process is in it.
func (n *NSNet) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	var errs []error
	for i, id := range n.ids {
		if ns, ok := n.ns[id]; ok {
			_ = Run(IPBin, "netns", "del", ns)
		}
		// The veth goes with the namespace once its last process is gone;
		// delete the host side in case it is still there.
		host := fmt.Sprintf("lfj%dh%d", n.pid, i)
		if strings.Contains(Output(IPBin, "-o", "link", "show", host), host) {
			_ = Run(IPBin, "link", "del", host)
		}
	}
	if strings.Contains(Output(IptablesBin, "-S", "FORWARD"), "-i "+n.bridge+" ") {
		errs = append(errs, Run(IptablesBin, "-D", "FORWARD", "-i", n.bridge, "-o", n.bridge, "-j", "ACCEPT"))
	}
	if strings.Contains(Output(IPBin, "-o", "link", "show", n.bridge), n.bridge) {
		errs = append(errs, Run(IPBin, "link", "del", n.bridge))
	}
	return errors.Join(errs...)
}
