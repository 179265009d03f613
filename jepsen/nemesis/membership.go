package nemesis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/history"
)

func (n *Nemesis) memberUnreachable(ctx context.Context, hold time.Duration) {
	bg := context.WithoutCancel(ctx) // always heal
	cl, ok := n.nodes.(Cluster)
	leader := ""
	if ok {
		leader = cl.Leader(bg)
	}
	nodes := len(n.nodes.Nodes())
	k := nodes
	if n.rng.IntN(2) == 0 {
		k = 1 + n.rng.IntN(nodes)
	}
	var addrs []string
	var err error
	if leader != "" {
		addrs, err = cl.FreeAddrs(k) // closed before it returns: nothing listens there
	}
	if !ok || leader == "" || err != nil {
		why := "no leader"
		if err != nil {
			why = err.Error()
		}
		n.notDone(history.NemMemberUnreachable, "error: "+why)
		return
	}
	n.mu.Lock()
	seq := n.counts[history.NemMemberUnreachable] + 1
	n.mu.Unlock()
	voters := "1 voter"
	if k > 1 {
		voters = fmt.Sprintf("%d voters", k)
	}
	n.progress(fmt.Sprintf("nemesis: %s: ask %s (the leader) to add %s at %s, where nothing listens",
		history.NemMemberUnreachable, leader, voters, strings.Join(addrs, ",")))
	n.record(history.Fault{Phase: "start", Kind: history.NemMemberUnreachable, Target: leader, Leader: true,
		Detail: fmt.Sprintf("adding %s at %s (nothing listens there), one after another", voters, strings.Join(addrs, ","))})
	out := &history.MembershipOutcome{}
	unreachable := map[string]string{} // addr -> id
	for i, addr := range addrs {
		id := fmt.Sprintf("u%d-%d", seq, i+1)
		unreachable[addr] = id
		t := time.Now()
		err := cl.Join(bg, id, addr)
		a := history.MemberAdd{ID: id, Addr: addr, Answer: joinAnswer(err), TookNs: int64(time.Since(t))}
		if err != nil {
			a.Error = err.Error()
		}
		out.Adds = append(out.Adds, a)
	}
	listed := map[string]bool{}
	for deadline := time.Now().Add(max(hold, 2*time.Second)); ; time.Sleep(250 * time.Millisecond) {
		listedIn(cl.NodeStates(bg), unreachable, listed, nil)
		if time.Now().After(deadline) {
			break
		}
	}
	// Heal: remove every add that was not refused (one whose answer was
	// lost may have been added).
	var herrs []string
	for _, a := range out.Adds {
		if a.Answer == history.AddRefused {
			continue
		}
		if err := cl.RemoveBounded(bg, a.ID); err != nil {
			herrs = append(herrs, fmt.Sprintf("remove %s: %v", a.ID, err))
		}
	}
	var left map[string]bool
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		left = map[string]bool{}
		listedIn(cl.NodeStates(bg), unreachable, listed, left)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	out.Voters, out.Left = slices.Sorted(maps.Keys(listed)), slices.Sorted(maps.Keys(left))
	answered := 0
	var summary []string
	for _, a := range out.Adds {
		if a.Answer != history.AddError {
			answered++
		}
		summary = append(summary, fmt.Sprintf("%s at %s: %s in %v", a.ID, a.Addr, a.Answer, time.Duration(a.TookNs).Round(time.Millisecond)))
	}
	detail := strings.Join(summary, "; ")
	if len(out.Voters) > 0 {
		detail += "; listed as voters: " + strings.Join(out.Voters, ", ")
	}
	if len(out.Left) > 0 {
		detail += "; still members after the heal: " + strings.Join(out.Left, ", ")
	}
	if len(herrs) > 0 {
		detail += "; heal errors: " + strings.Join(herrs, "; ")
	}
	n.record(history.Fault{Phase: "heal", Kind: history.NemMemberUnreachable, Target: leader, Effective: answered == k, Membership: out, Detail: detail})
}

// joinAnswer classifies a Join's outcome.
func joinAnswer(err error) string {
	switch status.Code(err) {
	case codes.OK:
		return history.AddAdded
	case codes.FailedPrecondition:
		return history.AddRefused
	}
	return history.AddError
}

// listedIn notes, for each node's status, the unreachable members it
// lists: as voters into voters, and any of them into left (when not nil).
func listedIn(states map[string]*api.StatusResponse, unreachable map[string]string, voters, left map[string]bool) {
	for node, st := range states {
		for _, m := range st.Members {
			if _, ok := unreachable[m.Addr]; !ok {
				continue
			}
			what := fmt.Sprintf("%s: %s at %s", node, m.Id, m.Addr)
			if m.Suffrage == "voter" {
				voters[what] = true
			}
			if left != nil {
				left[what] = true
			}
		}
	}
}
