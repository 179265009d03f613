package checker

import (
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// The member-unreachable nemesis's checker (nemesis/membership.go).

// NameMembershipQuorum is CheckMembershipKeepsQuorum's name.
const NameMembershipQuorum = "membership-keeps-quorum"

// Anomalies of CheckMembershipKeepsQuorum.
const (
	// AnomalyUnreachableVoter: an address where nothing listens became a
	// voter (the add was answered as done, or a node listed it as one).
	AnomalyUnreachableVoter = "unreachable-voter-added"
	// AnomalyUnreachableKept: after the heal a node still listed an
	// unreachable member (the cluster could not remove it).
	AnomalyUnreachableKept = "unreachable-member-kept"
	// AnomalyUnavailableMemberChange: a caller saw no successful call for
	// longer than the bound during such a fault or after its heal.
	AnomalyUnavailableMemberChange = "unavailable-during-member-change"
)

// CheckMembershipKeepsQuorum is the member-unreachable nemesis's checker
// (issue 14 §3): no address where nothing listens ever becomes a voter
// (an add answered as done, or a node listing it as a voter), none is
// left in the configuration after the heal, and a caller pinned to any
// node sees a successful call at least every bound while such a fault
// holds and until settleAfterHeal after its heal (windows of
// unavailability, as unavailability-bounded computes them, that overlap
// such a fault and no fault of another kind; no node is hit by it, so
// every prober is judged).
func CheckMembershipKeepsQuorum(samples []history.ProbeSample, faults []history.Fault, bound time.Duration) Result {
	f := NewFinding(NameMembershipQuorum)
	for _, x := range faults {
		if x.Kind != history.NemMemberUnreachable || x.Phase != "heal" || x.Membership == nil {
			continue
		}
		for _, a := range x.Membership.Adds {
			if a.Answer == history.AddError {
				continue
			}
			f.R.Checked++
			if a.Answer == history.AddAdded {
				f.Invalid(AnomalyUnreachableVoter, "the leader (%s) added %s at %s, where nothing listens, as a voter", x.Target, a.ID, a.Addr)
			}
		}
		for _, v := range x.Membership.Voters {
			f.Invalid(AnomalyUnreachableVoter, "a node listed an unreachable member as a voter (%s)", v)
		}
		for _, l := range x.Membership.Left {
			f.Invalid(AnomalyUnreachableKept, "after the heal a node still listed an unreachable member (%s): the cluster could not remove it", l)
		}
	}
	spans := heldSpans(faults)
	for _, w := range probeWindows(samples, bound) {
		mine, other := false, false
		for _, sp := range spans {
			if sp.end < w.start || sp.start > w.end {
				continue
			}
			if sp.kind == history.NemMemberUnreachable {
				mine = true
			} else {
				other = true
			}
		}
		if !mine || other {
			continue
		}
		f.R.Checked++
		if d := time.Duration(w.end - w.start); d > bound {
			f.Invalid(AnomalyUnavailableMemberChange, "a caller pinned to %s saw no successful call for %v (%d calls failed or slow, from %s to %s; last error: %s) while unreachable members were being added; bound %v",
				w.node, d.Round(time.Millisecond), w.failed, rt(w.start), rt(w.end), w.lastErr, bound)
		}
	}
	return f.Done("answered add of an unreachable member")
}
