package nemesis

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// ComboNemeses lists the combined kinds; partition-kill needs a Net.
var ComboNemeses = []string{history.NemKillMinority, history.NemRollingRestart, history.NemPartitionKill}

// killMinority kills ⌊(n−1)/2⌋ nodes at once and restarts them after hold.
// Effective when every kill took and a leader was seen among the survivors
// while they were down (a quorum was up and served).
func (n *Nemesis) killMinority(ctx context.Context, hold time.Duration) {
	bg := context.WithoutCancel(ctx)
	ids := n.nodes.Nodes()
	k := (len(ids) - 1) / 2
	leader := n.nodes.Leader(bg)
	var victims []string
	if leader != "" && n.rng.IntN(2) == 0 {
		victims = append(victims, leader)
	}
	for _, i := range n.rng.Perm(len(ids)) {
		if len(victims) == k {
			break
		}
		if ids[i] != leader {
			victims = append(victims, ids[i])
		}
	}
	var errs []string
	for _, id := range victims {
		if err := n.nodes.Kill9(id); err != nil {
			errs = append(errs, id+": "+err.Error())
		}
	}
	n.progress(fmt.Sprintf("nemesis: kill -9 %s at once (a minority of %d)", strings.Join(victims, ","), len(ids)))
	n.record(history.Fault{Phase: "start", Kind: history.NemKillMinority, Target: strings.Join(victims, ","), Leader: contains(victims, leader),
		Detail: errString(joinErrs(errs), fmt.Sprintf("SIGKILL %d of %d nodes; leader was %s", len(victims), len(ids), orNone(leader)))})
	if hold < 2*time.Second {
		hold = 2 * time.Second // long enough for an election among the survivors
	}
	obs := n.observe(bg, hold)
	var survivors []string
	for _, id := range ids {
		if !contains(victims, id) {
			survivors = append(survivors, id)
		}
	}
	nl := obs.leaderIn(survivors, "", 0)
	var rerrs []string
	for _, id := range victims {
		if err := n.nodes.Restart(id); err != nil {
			rerrs = append(rerrs, id+": "+err.Error())
		}
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemKillMinority, Target: strings.Join(victims, ","),
		Effective: len(errs) == 0 && len(victims) == k && nl != "",
		Detail:    errString(joinErrs(rerrs), fmt.Sprintf("restarted from their data dirs; leader among the survivors meanwhile: %s", orNone(nl)))})
}

// rollingRestart restarts every node in turn, the leader last (as an
// operator upgrading a cluster would), each with SIGTERM and a wait until
// it reports the leader's commit index again. Bounded: 20 s per node.
func (n *Nemesis) rollingRestart(ctx context.Context) {
	bg := context.WithoutCancel(ctx)
	ids := n.nodes.Nodes()
	leader := n.nodes.Leader(bg)
	order := make([]string, 0, len(ids))
	for _, i := range n.rng.Perm(len(ids)) {
		if ids[i] != leader {
			order = append(order, ids[i])
		}
	}
	if leader != "" {
		order = append(order, leader)
	}
	n.progress("nemesis: rolling restart " + strings.Join(order, ","))
	n.record(history.Fault{Phase: "start", Kind: history.NemRollingRestart, Target: strings.Join(order, ","), Leader: leader != "",
		Detail: fmt.Sprintf("SIGTERM, restart and catch up, one node at a time, leader %s last", orNone(leader))})
	c, isCluster := n.nodes.(Cluster)
	var done, problems []string
	for _, id := range order {
		if isCluster {
			c.Process(id).Kill(syscall.SIGTERM, 10*time.Second)
		} else if err := n.nodes.Kill9(id); err != nil {
			problems = append(problems, id+": "+err.Error())
			continue
		}
		if err := n.nodes.Restart(id); err != nil {
			problems = append(problems, id+": restart: "+err.Error())
			continue
		}
		if !n.caughtUp(bg, id, 20*time.Second) {
			problems = append(problems, id+": not caught up within 20s")
			continue
		}
		done = append(done, id)
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemRollingRestart, Target: strings.Join(order, ","),
		Effective: len(done) == len(order),
		Detail:    fmt.Sprintf("restarted and caught up: %s; problems: %s", orNone(strings.Join(done, ",")), orNone(strings.Join(problems, "; ")))})
}

// caughtUp waits until node id reports an applied index at or above the
// commit index a leader reported after the restart.
func (n *Nemesis) caughtUp(ctx context.Context, id string, within time.Duration) bool {
	ns, ok := n.nodes.(nodeStater)
	if !ok {
		return sleepCtx(ctx, 2*time.Second)
	}
	deadline := time.Now().Add(within)
	var target uint64
	for time.Now().Before(deadline) {
		sts := ns.NodeStates(ctx)
		if target == 0 {
			for _, st := range sts {
				if st.State == "leader" {
					target = st.CommitIndex
				}
			}
		}
		if st, ok := sts[id]; ok && target > 0 && st.AppliedIndex >= target {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// partitionKill partitions the nodes into a minority and a majority and,
// during the cut, kills -9 one node of the majority (its leader if it has
// one); after hold it restarts the node and heals the network. The
// majority is then short of a quorum until the heal: no one may be
// granted anything in conflict with what the minority's clients saw.
func (n *Nemesis) partitionKill(ctx context.Context, hold time.Duration) {
	if n.net == nil {
		n.record(history.Fault{Phase: "start", Kind: history.NemPartitionKill, Detail: "error: the cluster has no Net (started without a net mode)"})
		n.record(history.Fault{Phase: "heal", Kind: history.NemPartitionKill, Detail: "nothing injected"})
		return
	}
	bg := context.WithoutCancel(ctx)
	leader, term := n.currentTerm(bg)
	g, desc, majority := n.grudge(history.NemPartitionHalves, leader, n.nodes.Nodes())
	err := n.net.Partition(g)
	n.progress(fmt.Sprintf("nemesis: partition-kill: %s", desc))
	// Let the majority elect (or keep) a leader, then kill it.
	obs := n.observe(bg, 1500*time.Millisecond)
	victim := obs.leaderIn(majority, "", 0)
	if victim == "" && len(majority) > 0 {
		victim = majority[n.rng.IntN(len(majority))]
	}
	kerr := n.nodes.Kill9(victim)
	n.record(history.Fault{Phase: "start", Kind: history.NemPartitionKill, Target: victim, Leader: victim == leader,
		Detail: errString(joinErrs(errList(err, kerr)), fmt.Sprintf("%s; leader %s at term %d; then SIGKILL %s of the majority %s",
			desc, orNone(leader), term, victim, strings.Join(majority, ",")))})
	if hold < 2*time.Second {
		hold = 2 * time.Second
	}
	sleepCtx(bg, hold)
	st := n.net.Stats()
	rerr := n.nodes.Restart(victim)
	herr := n.net.Heal()
	n.record(history.Fault{Phase: "heal", Kind: history.NemPartitionKill, Target: victim,
		Effective: err == nil && kerr == nil && st.HeldTotal() > 0,
		Detail:    errString(joinErrs(errList(rerr, herr)), fmt.Sprintf("restarted %s, healed; traffic held back %d", victim, st.HeldTotal()))})
}

// loseTail is the power cut the leader's early answers would not survive
// (cluster/DESIGN.md, "The leader's log"): a minority of followers is cut
// off, the leader and the other followers (served) commit without them,
// then the leader is killed -9 and served stopped with SIGSTOP at once.
// The leader loses what it had queued and not written, as a power cut
// would. It is restarted and the cut healed, so that it and the followers
// that were cut off, a majority, elect a leader without served; served
// continue after hold. Only an entry that served alone held may be
// overwritten: one that was answered or applied must survive. Effective
// when the cut, the kill and every stop took and a leader was seen among
// the leader and the cut-off followers after the heal.
func (n *Nemesis) loseTail(ctx context.Context, hold time.Duration) {
	if n.net == nil {
		n.notDone(history.NemLoseTail, "error: the cluster has no Net (started without a net mode)")
		return
	}
	bg := context.WithoutCancel(ctx)
	leader, term := n.currentTerm(bg)
	if leader == "" {
		n.notDone(history.NemLoseTail, "no leader to kill")
		return
	}
	ids := n.nodes.Nodes()
	if len(ids) < 3 || len(ids)%2 == 0 {
		// The leader and the cut-off followers, and the leader and the
		// rest, are both majorities only when the cluster is odd.
		n.notDone(history.NemLoseTail, fmt.Sprintf("needs an odd number of nodes, not %d", len(ids)))
		return
	}
	var followers []string
	for _, id := range ids {
		if id != leader {
			followers = append(followers, id)
		}
	}
	n.rng.Shuffle(len(followers), func(a, b int) { followers[a], followers[b] = followers[b], followers[a] })
	k := (len(ids) - 1) / 2
	cutOff, served := followers[:k], followers[k:]
	g := map[string][]string{}
	cutBetween(g, cutOff, append([]string{leader}, served...))
	err := n.net.Partition(g)
	n.progress(fmt.Sprintf("nemesis: lose-tail: %s cut off; %s and %s serve, then lose the leader's unwritten tail", strings.Join(cutOff, ","), leader, strings.Join(served, ",")))
	sleepCtx(bg, time.Second) // the leader commits with served alone
	kerr := n.nodes.Kill9(leader)
	var errs []string
	stoppedAll := true
	for _, id := range served {
		stopped, perr := n.nodes.Pause(id)
		stoppedAll = stoppedAll && stopped
		if perr != nil {
			errs = append(errs, id+": "+perr.Error())
		}
	}
	n.record(history.Fault{Phase: "start", Kind: history.NemLoseTail, Target: leader, Leader: true,
		Detail: errString(joinErrs(append(errList(err, kerr), errs...)), fmt.Sprintf("cut off %s; leader %s at term %d; then SIGKILL %s and SIGSTOP %s",
			strings.Join(cutOff, ","), leader, term, leader, strings.Join(served, ",")))})
	rerr := n.nodes.Restart(leader)
	herr := n.net.Heal()
	if hold < 3*time.Second {
		hold = 3 * time.Second // a restart and an election without served
	}
	obs := n.observe(bg, hold)
	nl := obs.leaderIn(append([]string{leader}, cutOff...), "", term+1)
	var cerrs []string
	for _, id := range served {
		if err := n.nodes.Resume(id); err != nil {
			cerrs = append(cerrs, id+": "+err.Error())
		}
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemLoseTail, Target: leader,
		Effective: err == nil && kerr == nil && len(errs) == 0 && stoppedAll && nl != "",
		Detail: errString(joinErrs(append(errList(rerr, herr), cerrs...)), fmt.Sprintf("restarted %s, healed; leader without %s: %s; SIGCONT %s",
			leader, strings.Join(served, ","), orNone(nl), strings.Join(served, ",")))})
}

func errList(errs ...error) []string {
	var out []string
	for _, e := range errs {
		if e != nil {
			out = append(out, e.Error())
		}
	}
	return out
}

// joinErrs is nil for no errors, else one error listing them.
func joinErrs(errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}
