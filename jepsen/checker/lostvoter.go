package checker

import "github.com/leasefence/leasefence/jepsen/history"

// NameLostVoter is the checker of NemLostVoter's outcomes.
const NameLostVoter = "lost-voter-refused"

// AnomalyLostVoterServed: a voter started on an empty data dir under its
// old id, not removed, ran as a member.
const AnomalyLostVoterServed = "lost-voter-served"

// CheckLostVoterRefused checks that every voter NemLostVoter started again
// on an empty data dir, with --join or with its founding --bootstrap
// list, refused to start (cluster.ErrLostVoter) rather than run with an
// empty log, with which it would grant its vote to any candidate, one
// missing entries the cluster committed among them. Its findings say
// which start it was.
func CheckLostVoterRefused(faults []history.Fault) Result {
	f := NewFinding(NameLostVoter)
	for _, x := range faults {
		if x.Kind != history.NemLostVoter || x.Phase != "heal" || x.LostVoter == nil {
			continue
		}
		switch o := x.LostVoter; {
		case o.Refused:
			f.R.Checked++
		case o.Served:
			f.R.Checked++
			f.Invalid(AnomalyLostVoterServed, "%s, a voter started again on an empty data dir under its old id (not removed)%s, ran as a member with an empty log", x.Target, startedWith(o))
		default:
			f.Unknown("%s neither refused nor ran within the watch after its data dir was lost%s", x.Target, startedWith(o))
		}
	}
	return f.Done("lost-voter fault")
}

// startedWith says how NemLostVoter started the node (o.Via; a history
// from before the bootstrap variant has none: --join).
func startedWith(o *history.LostVoterOutcome) string {
	switch o.Via {
	case history.LostVoterViaBootstrap:
		return " with its founding --bootstrap list"
	case history.LostVoterViaBootstrapAlone:
		return " with its founding --bootstrap list while every other node was down"
	}
	return " with --join"
}
