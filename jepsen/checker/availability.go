package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// NameUnavailability is the checker of client-observed unavailability.
const NameUnavailability = "unavailability-bounded"

// UnavailabilityBound is the longest a caller may see no successful call
// while a quorum is up and connected: about one election with default
// settings, plus slack (DESIGN.md, "Failover as a client sees it").
const UnavailabilityBound = 3 * time.Second

// boundedKinds are the faults that leave a quorum of nodes up and
// connected: one node killed, paused or cut off. During them (and while a
// killed or paused node comes back), a caller pinned to a node of that
// quorum must see a successful call at least every UnavailabilityBound.
var boundedKinds = map[string]bool{
	history.NemKill: true, history.NemKillLeader: true, history.NemPause: true, history.NemPauseLeader: true, history.NemPartitionLeader: true, history.NemSilentLeader: true,
}

// settleAfterHeal is how long after a heal a window still counts as the
// fault's: the node that was hit rejoins, and may lead again.
const settleAfterHeal = 5 * time.Second

// unavailableWindow is a stretch during which one prober saw no success.
type unavailableWindow struct {
	node       string
	start, end int64
	failed     int
	lastErr    string
}

// CheckUnavailabilityBounded checks what a caller sees of a fault that
// leaves a quorum up: for each prober, a window runs from the invocation
// of a call that failed (or succeeded only after more than bound) to the
// completion of the next success; a window that overlaps a fault of
// boundedKinds (until settleAfterHeal after its heal), whose node was not
// the one hit, and that overlaps no other fault, must be at most bound.
// The witness and detail give the distribution of the judged windows.
func CheckUnavailabilityBounded(samples []history.ProbeSample, faults []history.Fault, bound time.Duration) (Result, []time.Duration) {
	f := NewFinding(NameUnavailability)
	windows := probeWindows(samples, bound)
	spans := heldSpans(faults)
	var judged []time.Duration
	for _, w := range windows {
		bounded, other, hit := false, false, false
		for _, sp := range spans {
			if sp.end < w.start || sp.start > w.end {
				continue
			}
			if boundedKinds[sp.kind] {
				bounded = true
			} else {
				other = true
			}
			hit = hit || sp.target == w.node
		}
		if !bounded || other || hit {
			continue
		}
		d := time.Duration(w.end - w.start)
		judged = append(judged, d)
		f.R.Checked++
		if d > bound {
			f.Invalid("unavailable-too-long", "a caller pinned to %s saw no successful call for %v (%d calls failed or slow, from %s to %s; last error: %s) while a quorum was up; bound %v",
				w.node, d.Round(time.Millisecond), w.failed, rt(w.start), rt(w.end), w.lastErr, bound)
		}
	}
	sort.Slice(judged, func(i, j int) bool { return judged[i] < judged[j] })
	if f.R.Verdict == Valid && f.R.Checked == 0 && len(samples) > 0 {
		// Probes ran, and no fault of a bounded kind cost them anything.
		f.R.Checked = len(samples)
		return f.R, judged
	}
	return f.Done("window of unavailability during a fault that leaves a quorum up"), judged
}

// WindowsString summarises judged windows: count, median and max.
func WindowsString(ws []time.Duration) string {
	if len(ws) == 0 {
		return "no window"
	}
	return fmt.Sprintf("%d windows, median %v, max %v", len(ws), ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond))
}

// probeWindows returns each prober's windows of unavailability: from the
// invocation of a call that failed (or succeeded only after more than
// bound) to the completion of the next success; a window never closed
// ends at its last sample.
func probeWindows(samples []history.ProbeSample, bound time.Duration) []unavailableWindow {
	byNode := map[string][]history.ProbeSample{}
	for _, s := range samples {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	var windows []unavailableWindow
	for node, ss := range byNode {
		sort.Slice(ss, func(i, j int) bool { return ss[i].InvokeNs < ss[j].InvokeNs })
		var open *unavailableWindow
		for _, s := range ss {
			slow := time.Duration(s.CompleteNs-s.InvokeNs) > bound
			switch {
			case s.OK && !slow:
				if open != nil {
					open.end = s.CompleteNs
					windows = append(windows, *open)
					open = nil
				}
			case open == nil:
				open = &unavailableWindow{node: node, start: s.InvokeNs, end: s.CompleteNs}
				fallthrough
			default:
				open.failed++
				open.end = s.CompleteNs
				if s.Error != "" {
					open.lastErr = s.Error
				}
				if s.OK { // a slow success closes the window it opened
					windows = append(windows, *open)
					open = nil
				}
			}
		}
		if open != nil { // never recovered before the run ended
			windows = append(windows, *open)
		}
	}
	return windows
}

// heldSpan is a fault from its start until settleAfterHeal after its heal.
type heldSpan struct {
	kind, target string
	start, end   int64
}

// heldSpans pairs each fault's start and heal (a fault never healed runs
// to the end of time).
func heldSpans(faults []history.Fault) []heldSpan {
	var spans []heldSpan
	starts := map[string]history.Fault{}
	for _, ft := range faults {
		key := ft.Kind + "/" + ft.Target
		switch ft.Phase {
		case "start":
			starts[key] = ft
		case "heal":
			if st, ok := starts[key]; ok {
				spans = append(spans, heldSpan{ft.Kind, ft.Target, st.TimeNs, ft.TimeNs + int64(settleAfterHeal)})
				delete(starts, key)
			}
		}
	}
	for key, st := range starts { // never healed: to the end of time
		spans = append(spans, heldSpan{st.Kind, key[len(st.Kind)+1:], st.TimeNs, 1<<63 - 1})
	}
	return spans
}
