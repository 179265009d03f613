package nemesis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// lostVoterMarker is what leased says when it refuses to start as a voter
// whose data was lost (cluster.ErrLostVoter), with --join or with its
// --bootstrap list.
const lostVoterMarker = "its data was lost"

// lostVoter kills a follower, removes its whole data dir, starts it again
// under its old id (no remove), with --join or with its founding
// --bootstrap list, the latter also while every other node is down, the
// others started again 2 s later (lostVoterVia), and watches whether it
// refuses or runs; the heal replaces it (remove, wipe, join). Effective when the
// node was wiped and its replacement joined and caught up.
func (n *Nemesis) lostVoter(ctx context.Context, hold time.Duration) {
	cl, id, ok := n.clusterFollower(ctx, history.NemLostVoter, "no follower to wipe (no leader)")
	if !ok {
		return
	}
	via := lostVoterVia(n.lostVoters, id, cl.Founders())
	n.lostVoters++
	flag := "--" + via
	switch via {
	case history.LostVoterViaBootstrap:
		flag = "its founding --bootstrap list"
	case history.LostVoterViaBootstrapAlone:
		flag = "its founding --bootstrap list while every other node was down"
	}
	bg := context.WithoutCancel(ctx)
	n.progress(fmt.Sprintf("nemesis: %s: %s killed, its data dir lost, started again with %s (not removed)", history.NemLostVoter, id, flag))
	p := cl.Process(id)
	var down []string // the others, stopped for the alone start
	if via == history.LostVoterViaBootstrapAlone {
		for _, o := range cl.Nodes() {
			if o != id && cl.Kill9(o) == nil {
				down = append(down, o)
			}
		}
	}
	p.Kill(syscall.SIGKILL, 10*time.Second)
	err := os.RemoveAll(cl.DataDir(id))
	n.record(history.Fault{Phase: "start", Kind: history.NemLostVoter, Target: id, Detail: errString(err, "SIGKILL; data dir removed; started with "+flag+" under its old id")})
	out := &history.LostVoterOutcome{Via: via}
	logBefore := len(p.Tail(1 << 30))
	if err == nil {
		if via == history.LostVoterViaJoin {
			err = cl.Rejoin(bg, id)
		} else {
			err = cl.RestartFounder(id)
		}
		if len(down) > 0 {
			// Alone, it finds no one to ask: it must hold its votes
			// until the others, started again from their data, answer.
			sleepCtx(bg, 2*time.Second)
			for _, o := range down {
				if rerr := cl.Restart(o); rerr != nil && err == nil {
					err = fmt.Errorf("start %s again: %w", o, rerr)
				}
			}
		}
		if err == nil {
			watch := hold + 10*time.Second
			if len(down) > 0 {
				watch += 10 * time.Second // the others elect a leader first
			}
			observeLostVoter(bg, out, cl, id, p, logBefore, watch)
		}
	}
	p.Kill(syscall.SIGTERM, 15*time.Second)
	all := len(cl.Nodes())
	rerr := cl.RemoveMember(bg, id)
	if rerr == nil {
		cl.WaitMembers(bg, all-1, id, false)
		rerr = os.RemoveAll(cl.DataDir(id))
	}
	if rerr == nil {
		rerr = cl.Rejoin(bg, id)
	}
	joined := rerr == nil && cl.WaitMembers(bg, all, id, true) && cl.WaitCaughtUp(bg, id)
	what := "undecided"
	switch {
	case out.Refused:
		what = "refused to start"
	case out.Served:
		what = "ran as a voter with an empty log"
	}
	if err != nil {
		out = nil // nothing was started on an empty data dir: nothing to judge
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemLostVoter, Target: id, Effective: err == nil && joined, LostVoter: out,
		Detail: errString(rerr, fmt.Sprintf("started on an empty data dir with %s it %s; replaced (removed, wiped, rejoined and caught up: %v)", flag, what, joined))})
}

// lostVoterVia says how the fault-th lost-voter fault of a run (from 0)
// starts node id again, in turn: with the --bootstrap list the cluster
// was founded with (history.LostVoterViaBootstrap), with --join
// (history.LostVoterViaJoin), and with the --bootstrap list while every
// other node is down (history.LostVoterViaBootstrapAlone); a non-founder
// always with --join. A count, not a draw from the rng, so that the
// seed's other choices stay as they were. The bootstrap start comes
// first, because the suite's process-faults run injects lost-voter about
// once; the planted runs of lost-voter-unchecked, lost-founder-unchecked
// and founder-votes-unheld (30 s, five to seven faults) see each start at
// least once, and one is enough: every such start of the planted build is
// an anomaly.
func lostVoterVia(fault int, id string, founders []string) string {
	if !slices.Contains(founders, id) {
		return history.LostVoterViaJoin
	}
	switch fault % 3 {
	case 0:
		return history.LostVoterViaBootstrap
	case 2:
		return history.LostVoterViaBootstrapAlone
	}
	return history.LostVoterViaJoin
}

// observeLostVoter watches node id for up to d after its start on an
// empty data dir, into o.
func observeLostVoter(ctx context.Context, o *history.LostVoterOutcome, cl Cluster, id string, p Process, logBefore int, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		select {
		case <-p.Exited():
			log := p.Tail(1 << 30)
			if logBefore < len(log) {
				log = log[logBefore:]
			}
			o.Refused = strings.Contains(log, lostVoterMarker)
			return
		default:
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Status(sctx, id)
		cancel()
		if err == nil && st.Term > 0 && !st.VotesHeld {
			o.Served = true
			return
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}
