package netns

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Rules builds the harness's iptables faults inside the nodes' network
// namespaces; namespace mode (NSNet) and jepsen's docker mode share it and
// differ only in how a command enters a node's namespace (In). In each
// node's namespace, INPUT jumps to two chains (Chains makes them):
//
//   - LFJ-PART: DROP for each peer the node does not receive from;
//   - LFJ-FLAKY: a SYN from a peer is answered with a reset with
//     probability p (connection refused), and any other peer packet with
//     probability p/100 (an open connection reset).
//
// Silence adds two DROP rules of its own to INPUT and OUTPUT. Rules keeps
// no state and takes no lock: the caller serialises calls and remembers
// the faults in place.
type Rules struct {
	IDs []string          // the nodes
	IP  map[string]string // node id -> address
	// In returns the command (program and leading arguments) that runs a
	// program inside node id's network namespace, or an error when it
	// cannot (the node's container does not run).
	In func(id string) ([]string, error)
}

// Iptables runs iptables with args inside node id's namespace.
func (r Rules) Iptables(id string, args ...string) error {
	in, err := r.In(id)
	if err != nil {
		return err
	}
	return Run(in[0], append(append(in[1:len(in):len(in)], IptablesBin), args...)...)
}

// Chains creates the fault chains in node id's fresh namespace and makes
// INPUT jump to them.
func (r Rules) Chains(id string) []error {
	return []error{
		r.Iptables(id, "-N", "LFJ-PART"), r.Iptables(id, "-N", "LFJ-FLAKY"),
		r.Iptables(id, "-A", "INPUT", "-j", "LFJ-PART"), r.Iptables(id, "-A", "INPUT", "-j", "LFJ-FLAKY"),
	}
}

// Partition replaces every node's LFJ-PART rules by grudge's (b does not
// receive from grudge[b]; a node's grudge against itself is ignored) and
// returns the grudge now in place. The caller checks the ids first
// (CheckGrudge).
func (r Rules) Partition(grudge map[string][]string) (map[string][]string, error) {
	var errs []error
	for _, b := range r.IDs {
		errs = append(errs, r.Iptables(b, "-F", "LFJ-PART"))
	}
	placed := map[string][]string{}
	for b, froms := range grudge {
		for _, a := range froms {
			if a == b {
				continue
			}
			placed[b] = append(placed[b], a)
		}
		errs = append(errs, r.Drop(b, placed[b])...)
	}
	return placed, errors.Join(errs...)
}

// Drop appends to b's LFJ-PART a DROP of the packets from each of froms.
func (r Rules) Drop(b string, froms []string) []error {
	var errs []error
	for _, a := range froms {
		errs = append(errs, r.Iptables(b, "-A", "LFJ-PART", "-s", r.IP[a], "-j", "DROP"))
	}
	return errs
}

// Flaky replaces every node's LFJ-FLAKY rules by those of probability p
// (0: none). The caller checks that p is in [0, 1].
func (r Rules) Flaky(p float64) error {
	var errs []error
	for _, b := range r.IDs {
		errs = append(errs, r.Iptables(b, "-F", "LFJ-FLAKY"))
		errs = append(errs, r.FlakyFor(b, p)...)
	}
	return errors.Join(errs...)
}

// FlakyFor appends to b's LFJ-FLAKY the rules of probability p (none for
// p == 0) against each peer.
func (r Rules) FlakyFor(b string, p float64) []error {
	if p == 0 {
		return nil
	}
	var errs []error
	for _, a := range r.IDs {
		if a == b {
			continue
		}
		errs = append(errs,
			r.Iptables(b, "-A", "LFJ-FLAKY", "-s", r.IP[a], "-p", "tcp", "--syn", "-m", "statistic", "--mode", "random",
				"--probability", strconv.FormatFloat(p, 'f', 4, 64), "-j", "REJECT", "--reject-with", "tcp-reset"),
			r.Iptables(b, "-A", "LFJ-FLAKY", "-s", r.IP[a], "-p", "tcp", "-m", "statistic", "--mode", "random",
				"--probability", strconv.FormatFloat(p/100, 'f', 5, 64), "-j", "REJECT", "--reject-with", "tcp-reset"))
	}
	return errs
}

// FlakyString describes Flaky(p)'s rules for Describe: "" for p == 0,
// else "; flaky: ..." with both probabilities.
func FlakyString(p float64) string {
	if p == 0 {
		return ""
	}
	return fmt.Sprintf("; flaky: peer SYNs reset with p=%.2f, other peer packets with p=%.4f", p, p/100)
}

// Silence (on) inserts the rules that drop every packet into and out of
// id's namespace but its loopback; off deletes them. The caller makes
// sure they are not inserted twice or deleted when absent.
func (r Rules) Silence(id string, on bool) error {
	op := "-I"
	if !on {
		op = "-D"
	}
	return errors.Join(
		r.Iptables(id, op, "INPUT", "!", "-i", "lo", "-j", "DROP"),
		r.Iptables(id, op, "OUTPUT", "!", "-o", "lo", "-j", "DROP"),
	)
}

// Stats reads the packet counters of the fault chains: LFJ-PART's as
// packets held from the source's node to the receiver, LFJ-FLAKY's as
// resets. A node In refuses counts nothing.
func (r Rules) Stats() Stats {
	s := Stats{Held: map[string]int64{}}
	byIP := map[string]string{}
	for id, ip := range r.IP {
		byIP[ip] = id
	}
	for _, b := range r.IDs {
		in, err := r.In(b)
		if err != nil {
			continue
		}
		for _, chain := range []string{"LFJ-PART", "LFJ-FLAKY"} {
			args := append(in[1:len(in):len(in)], IptablesBin, "-L", chain, "-v", "-x", "-n")
			s.addRuleCounters(chain, b, byIP, Output(in[0], args...))
		}
	}
	return s
}

// addRuleCounters adds the packet counters of `iptables -L chain -v -x -n`
// in node b's namespace (out) to s: LFJ-PART's as packets held from the
// source's node (byIP) to b, LFJ-FLAKY's as resets.
func (s *Stats) addRuleCounters(chain, b string, byIP map[string]string, out string) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l) // pkts bytes target prot opt in out source destination ...
		if len(f) < 9 {
			continue
		}
		pkts, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if chain == "LFJ-PART" {
			s.Held[byIP[f[7]]+"->"+b] += pkts
		} else {
			s.Reset += pkts
		}
	}
}
