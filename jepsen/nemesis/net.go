package nemesis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
)

// NetNemeses lists the network nemeses.
var NetNemeses = []string{history.NemPartitionLeader, history.NemPartitionHalves, history.NemPartitionRing, history.NemPartitionBridge,
	history.NemPartitionOneway, history.NemNetSlow, history.NemNetFlaky}

func isNetNemesis(kind string) bool {
	for _, k := range NetNemeses {
		if k == kind {
			return true
		}
	}
	return false
}

// nodeStater is what network nemeses use to see a fault bite: every
// node's own view (state, leader, term). *Cluster implements it.
type nodeStater interface {
	NodeStates(ctx context.Context) map[string]*api.StatusResponse
}

// observation is what the nemesis saw of the cluster while a network
// fault was held.
type observation struct {
	leaders   map[string]uint64 // node seen leader -> highest term seen
	notLeader map[string]bool   // node seen answering as not leader
	terms     map[string]uint64 // highest term each node reported
	polls     int
}

// leaderIn returns a node of set other than exclude seen leading at a
// term of at least minTerm.
func (o *observation) leaderIn(set []string, exclude string, minTerm uint64) string {
	for _, id := range slices.Sorted(maps.Keys(o.leaders)) {
		if id != exclude && contains(set, id) && o.leaders[id] >= minTerm {
			return id
		}
	}
	return ""
}

// observe polls every node's status every 100 ms for d.
func (n *Nemesis) observe(ctx context.Context, d time.Duration) *observation {
	o := &observation{leaders: map[string]uint64{}, notLeader: map[string]bool{}, terms: map[string]uint64{}}
	ns, ok := n.nodes.(nodeStater)
	if !ok {
		sleepCtx(ctx, d)
		return o
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for id, st := range ns.NodeStates(ctx) {
			if st.Term > o.terms[id] {
				o.terms[id] = st.Term
			}
			if st.State == "leader" {
				if st.Term > o.leaders[id] {
					o.leaders[id] = st.Term
				}
			} else {
				o.notLeader[id] = true
			}
		}
		o.polls++
		time.Sleep(100 * time.Millisecond)
	}
	return o
}

func (o *observation) termsString() string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(o.terms)) {
		parts = append(parts, fmt.Sprintf("%s:%d", id, o.terms[id]))
	}
	return "terms " + strings.Join(parts, ",")
}

// currentTerm returns the leader and the highest term any node reports.
func (n *Nemesis) currentTerm(ctx context.Context) (string, uint64) {
	ns, ok := n.nodes.(nodeStater)
	if !ok {
		return n.nodes.Leader(ctx), 0
	}
	var leader string
	var term uint64
	for id, st := range ns.NodeStates(ctx) {
		if st.Term > term {
			term = st.Term
		}
		if st.State == "leader" {
			leader = id
		}
	}
	return leader, term
}

// cutBetween adds to grudge g that a and b do not hear each other.
func cutBetween(g map[string][]string, a, b []string) {
	for _, x := range a {
		for _, y := range b {
			g[x] = append(g[x], y)
			g[y] = append(g[y], x)
		}
	}
}

// grudges builds the partition of kind over ids (shuffled by the seed).
// It returns the grudge, a description, and the sides whose majority must
// elect a leader (nil when no such expectation holds).
func (n *Nemesis) grudge(kind, leader string, ids []string) (map[string][]string, string, []string) {
	ids = append([]string(nil), ids...)
	n.rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
	g := map[string][]string{}
	cut := func(a, b []string) { cutBetween(g, a, b) }
	switch kind {
	case history.NemPartitionLeader:
		if leader == "" {
			leader = ids[0]
		}
		var others []string
		for _, id := range ids {
			if id != leader {
				others = append(others, id)
			}
		}
		cut([]string{leader}, others)
		return g, fmt.Sprintf("isolate %s from %s", leader, strings.Join(others, ",")), others
	case history.NemPartitionHalves:
		k := 1 + n.rng.IntN((len(ids)-1)/2) // minority size
		minority, majority := ids[:k], ids[k:]
		cut(minority, majority)
		return g, fmt.Sprintf("minority %s | majority %s", strings.Join(minority, ","), strings.Join(majority, ",")), majority
	case history.NemPartitionRing:
		// Jepsen's majorities ring: over the ring, each window of m
		// consecutive nodes gives its middle node everything outside it as
		// a grudge, so every node hears a majority (its window) and no two
		// hear the same one.
		m := len(ids)/2 + 1
		var parts []string
		for i := range ids {
			win := make([]string, m)
			for j := 0; j < m; j++ {
				win[j] = ids[(i+j)%len(ids)]
			}
			mid := win[m/2]
			for _, id := range ids {
				if !contains(win, id) {
					g[mid] = append(g[mid], id)
				}
			}
			parts = append(parts, fmt.Sprintf("%s hears %s", mid, strings.Join(win, ",")))
		}
		return g, strings.Join(parts, "; "), nil
	case history.NemPartitionBridge:
		// The bridge is not the leader: a leading bridge keeps talking to
		// both halves, and since followers never talk to each other in
		// Raft, nothing would cross the cut (seen in a run: 0 bytes held).
		for i, id := range ids {
			if id != leader {
				ids[0], ids[i] = ids[i], ids[0]
				break
			}
		}
		bridge, rest := ids[0], ids[1:]
		a, b := rest[:len(rest)/2], rest[len(rest)/2:]
		cut(a, b)
		return g, fmt.Sprintf("%s | bridge %s | %s", strings.Join(a, ","), bridge, strings.Join(b, ",")), nil
	case history.NemPartitionOneway:
		victim := ids[0]
		g[victim] = append([]string(nil), ids[1:]...)
		return g, fmt.Sprintf("%s receives from nobody; %s still hear it", victim, strings.Join(ids[1:], ",")), nil
	}
	return g, "", nil
}

// netFault injects one network fault, holds it while watching the
// cluster, reads the Net's counters, heals, and waits (bounded) until a
// leader is back. Partitions are held at least 2 s so that an election
// (timeouts of 500 ms) can be seen.
func (n *Nemesis) netFault(ctx context.Context, kind string, hold time.Duration) {
	if n.net == nil {
		n.record(history.Fault{Phase: "start", Kind: kind, Detail: "error: the cluster has no Net (started without a net mode)"})
		n.record(history.Fault{Phase: "heal", Kind: kind, Detail: "nothing injected"})
		return
	}
	bg := context.WithoutCancel(ctx) // always heal
	leader, term := n.currentTerm(bg)
	var (
		err    error
		target string
		expect []string
		desc   string
	)
	switch kind {
	case history.NemNetSlow:
		delay := 20*time.Millisecond + time.Duration(n.rng.Int64N(int64(80*time.Millisecond)))
		jitter := delay / 2
		desc = fmt.Sprintf("delay %v + jitter [0,%v) on every link", delay, jitter)
		err = n.net.Slow(delay, jitter)
	case history.NemNetFlaky:
		p := 0.1 + 0.2*n.rng.Float64()
		desc = fmt.Sprintf("flaky links, p=%.2f", p)
		err = n.net.Flaky(p)
	default:
		var g map[string][]string
		g, desc, expect = n.grudge(kind, leader, n.nodes.Nodes())
		if kind == history.NemPartitionLeader {
			target = leader
		}
		err = n.net.Partition(g)
		if hold < 2*time.Second {
			hold = 2 * time.Second
		}
	}
	n.progress(fmt.Sprintf("nemesis: %s: %s", kind, desc))
	n.record(history.Fault{Phase: "start", Kind: kind, Target: target, Leader: target != "" && target == leader,
		Detail: errString(err, fmt.Sprintf("%s; leader %s at term %d; %s", desc, orNone(leader), term, n.net.Describe()))})
	obs := n.observe(bg, hold)
	st := n.net.Stats()
	herr := n.net.Heal()

	// What was seen, and whether it shows the fault biting.
	var seen []string
	effective := err == nil
	switch kind {
	case history.NemNetSlow:
		seen = append(seen, fmt.Sprintf("%d chunks delivered late", st.Delayed))
		effective = effective && st.Delayed > 0
	case history.NemNetFlaky:
		seen = append(seen, fmt.Sprintf("%d resets", st.Reset))
		effective = effective && st.Reset > 0
	default:
		seen = append(seen, fmt.Sprintf("traffic held back %d (%s)", st.HeldTotal(), heldString(st.Held)))
		effective = effective && st.HeldTotal() > 0
	}
	switch kind {
	case history.NemPartitionLeader:
		nl := obs.leaderIn(expect, leader, term+1)
		stepped := obs.notLeader[leader]
		seen = append(seen, fmt.Sprintf("new leader among the others: %s; old leader %s seen stepped down: %v", orNone(nl), orNone(leader), stepped))
		effective = effective && (nl != "" || stepped)
	case history.NemPartitionHalves:
		nl := obs.leaderIn(expect, "", term)
		seen = append(seen, fmt.Sprintf("leader on the majority side: %s", orNone(nl)))
		effective = effective && nl != ""
	default:
		var ls []string
		for _, id := range slices.Sorted(maps.Keys(obs.leaders)) {
			ls = append(ls, fmt.Sprintf("%s@%d", id, obs.leaders[id]))
		}
		seen = append(seen, "leaders seen: "+orNone(strings.Join(ls, ",")))
	}
	seen = append(seen, fmt.Sprintf("%s over %d polls", obs.termsString(), obs.polls))
	// Healed: wait (bounded) for a leader the nodes agree on.
	after := n.waitLeader(bg, 10*time.Second)
	seen = append(seen, "after heal leader "+orNone(after))
	if herr != nil {
		seen = append(seen, "heal error: "+herr.Error())
	}
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: target, Effective: effective, Detail: strings.Join(seen, "; ")})
}

func (n *Nemesis) waitLeader(ctx context.Context, d time.Duration) string {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := n.nodes.Leader(ctx); l != "" {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ""
}

func heldString(h map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, h[k]))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
