package nemesis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

func (n *Nemesis) silentLeader(ctx context.Context, hold time.Duration) {
	bg := context.WithoutCancel(ctx) // always heal
	leader, term := n.currentTerm(bg)
	if n.net == nil || leader == "" {
		why := "no leader known"
		if n.net == nil {
			why = "the cluster has no Net (started without a net mode)"
		}
		n.record(history.Fault{Phase: "start", Kind: history.NemSilentLeader, Detail: "error: " + why})
		n.record(history.Fault{Phase: "heal", Kind: history.NemSilentLeader, Detail: "nothing injected"})
		return
	}
	var others []string
	for _, id := range n.nodes.Nodes() {
		if id != leader {
			others = append(others, id)
		}
	}
	// At least 4 s: each status poll waits up to 1 s on the silent node,
	// so a shorter hold may see only two polls, both before the others'
	// election (seen in namespace mode: "new leader among the others:
	// none" with a 3.2 s hold, the new leader found right after heal).
	if hold < 4*time.Second {
		hold = 4 * time.Second
	}
	var (
		err  error
		desc string
		heal func() error
	)
	if ns, ok := n.net.(interface{ Silence(string, bool) error }); ok { // netns.NSNet, DockerNet
		desc = "every packet into and out of its namespace dropped, clients' included"
		err = ns.Silence(leader, true)
		heal = func() error { return ns.Silence(leader, false) }
	} else {
		desc = "every proxy of its peer links stalled both ways, not closed"
		g := map[string][]string{leader: others}
		for _, o := range others {
			g[o] = []string{leader}
		}
		err = n.net.Partition(g)
		heal = n.net.Heal
	}
	n.progress(fmt.Sprintf("nemesis: %s: %s (the leader): %s", history.NemSilentLeader, leader, desc))
	n.record(history.Fault{Phase: "start", Kind: history.NemSilentLeader, Target: leader, Leader: true,
		Detail: errString(err, fmt.Sprintf("%s; term %d", desc, term))})
	obs := n.observe(bg, hold)
	herr := heal()
	nl := obs.leaderIn(others, leader, term+1)
	seen := []string{fmt.Sprintf("new leader among the others: %s", orNone(nl)),
		fmt.Sprintf("%s over %d polls", obs.termsString(), obs.polls)}
	seen = append(seen, "after heal leader "+orNone(n.waitLeader(bg, 10*time.Second)))
	if herr != nil {
		seen = append(seen, "heal error: "+herr.Error())
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemSilentLeader, Target: leader, Effective: err == nil && nl != "", Detail: strings.Join(seen, "; ")})
}
