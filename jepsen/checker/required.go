package checker

import (
	"slices"

	"github.com/leasefence/leasefence/jepsen/history"
)

// The halves of the clock-drift-edge and restore nemeses that decide what
// their runs require (MarkRequired).

// ReasonDriftEdgeNoLin is why, in a clock-drift-edge run, a checker of the
// linearizability workload that found nothing to check does not decide it.
const ReasonDriftEdgeNoLin = "clock-drift-edge runs no linearizability workload (its ttls would exceed the max ttl)"

// driftEdgeRequired marks, in a run with NemClockDriftEdge, the verdicts
// of lease-linearizable, acknowledged-ops-durable and
// reads-see-watched-entries not required when they are unknown: they check the linearizability workload's operations
// (durable also the API renewals and releases that a stalling worker makes
// inside its lease, which may be none), and DriftEdgeFor leaves that
// workload out. An anomaly they find still fails the run.
func driftEdgeRequired(nemeses []string, rs []Result) {
	on := false
	for _, k := range nemeses {
		on = on || history.IsDriftEdge(k)
	}
	if !on {
		return
	}
	for i := range rs {
		if (rs[i].Checker == NameLinearizable || rs[i].Checker == NameDurable || rs[i].Checker == NameReadsSeeWatched) && rs[i].Verdict == history.Unknown {
			rs[i].NotRequired = ReasonDriftEdgeNoLin
		}
	}
}

// ReasonRestore says why a result does not decide a run with NemRestore.
const ReasonRestore = "a restore from a backup loses acknowledged state"

// restoreRequired marks what a run with NemRestore cannot require: the
// exclusion checkers (a holder of a lease granted after the backup keeps
// its safe window while the restored cluster grants the resource again),
// acknowledged durability and linearizability (the lost cluster's
// acknowledged operations are gone by design; the restored cluster's log
// indexes start again below those the watcher saw), and request-id identity (the
// request ids the lost cluster answered after the backup are unknown to the
// new one, so a reuse with changed parameters is rightly a new request).
func restoreRequired(nemeses []string, rs []Result) {
	on := false
	for _, k := range nemeses {
		on = on || history.IsRestore(k)
	}
	if !on {
		return
	}
	for i := range rs {
		switch rs[i].Checker {
		case NameGrantIntervals, NameSafeWindows, NameDurable, NameLinearizable, NameRequestIDs, NameReadsSeeWatched:
			rs[i].NotRequired = ReasonRestore
		}
	}
}

// ReasonSlowDisk is why, in a run with NemSlowDisk, renewals-bounded that
// found nothing to check does not decide it.
const ReasonSlowDisk = "slow-disk faults (14-18 s, 1-3 s apart) leave few keep-alive holds without a fault"

// slowDiskRequired marks, in a run with NemSlowDisk, renewals-bounded
// not required when it is unknown: it judges only holds without a fault,
// and slow disks cover most of the run. keepalive-leases-kept judges the
// holds through them. An anomaly it finds still fails the run.
func slowDiskRequired(nemeses []string, rs []Result) {
	if !slices.Contains(nemeses, history.NemSlowDisk) {
		return
	}
	for i := range rs {
		if rs[i].Checker == NameRenewals && rs[i].Verdict == history.Unknown {
			rs[i].NotRequired = ReasonSlowDisk
		}
	}
}

// ReasonOtherFaults is why keepalive-leases-kept that found nothing to
// check does not decide a run with faults it does not judge through.
const ReasonOtherFaults = "every keep-alive hold overlapped a fault other than slow-disk"

// keepAliveKeptRequired marks keepalive-leases-kept not required when it
// is unknown in a run with a nemesis other than slow-disk: it judges only
// holds without a fault or through slow disks, and the other faults may
// cover every hold. Without faults, or with slow-disk alone, it must
// decide; an anomaly it finds always fails the run.
func keepAliveKeptRequired(nemeses []string, rs []Result) {
	if !slices.ContainsFunc(nemeses, func(k string) bool { return !keptKinds[k] }) {
		return
	}
	for i := range rs {
		if rs[i].Checker == NameKeepAliveKept && rs[i].Verdict == history.Unknown {
			rs[i].NotRequired = ReasonOtherFaults
		}
	}
}
