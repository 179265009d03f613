package checker

import (
	"sort"

	"github.com/leasefence/leasefence/jepsen/history"
)

// NameReadsSeeWatched checks linearizable reads against the watch stream.
const NameReadsSeeWatched = "reads-see-watched-entries"

// AnomalyReadMissedWatched: a linearizable read answered from state older
// than an entry the watcher had already been sent.
const AnomalyReadMissedWatched = "read-missed-watched-entry"

// CheckReadsSeeWatched checks that a linearizable read reflects every
// entry the harness had seen before the read was invoked. A node publishes
// an entry's events only once it applied the entry, and applies only
// committed entries, so an event the watcher recorded at index X names an
// entry committed by then: a read invoked afterwards must answer from
// state at index X or later (its applied_index). The watcher follows a
// follower when it can, which sees an entry as soon as the cluster
// commits it; a leader that answered reads from state its apply had not
// yet reached would be caught here (lease-linearizable cannot see it: the
// leader acknowledges a write only after applying it, so no worker's own
// operation saw the entry first).
func CheckReadsSeeWatched(h []history.Record) Result {
	f := NewFinding(NameReadsSeeWatched)
	type seen struct {
		at  int64
		idx uint64
		pos string
	}
	var evs []seen
	invoked := map[string]int64{}
	for _, r := range h {
		switch {
		case r.Type == history.OpEvent:
			idx, _ := parsePosition(r.Position)
			evs = append(evs, seen{r.TimeNs, idx, r.Position})
		case r.Kind == history.Invoke && r.Type == history.OpRead:
			invoked[r.Op] = r.TimeNs
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	// newest[i]: the highest index among evs[:i+1].
	newest := make([]seen, len(evs))
	for i, e := range evs {
		newest[i] = e
		if i > 0 && newest[i-1].idx > e.idx {
			newest[i] = newest[i-1]
		}
	}
	for _, r := range h {
		if r.Kind != history.Complete || r.Type != history.OpRead || r.Result != history.OK || r.AppliedIndex == 0 {
			continue
		}
		at, ok := invoked[r.Op]
		if !ok {
			continue
		}
		f.R.Checked++
		i := sort.Search(len(evs), func(i int) bool { return evs[i].at >= at })
		if i == 0 {
			continue // nothing seen before the read
		}
		if e := newest[i-1]; r.AppliedIndex < e.idx {
			f.Invalid(AnomalyReadMissedWatched, "read %s by %s of %q invoked at %s answered from state at index %d, but the watcher had recorded the event at %s (index %d) at %s",
				r.Op, r.Worker, r.Resource, rt(at), r.AppliedIndex, e.pos, e.idx, rt(e.at))
		}
	}
	return f.Done("linearizable read")
}
