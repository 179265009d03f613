package checker

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// OpKeepAlive is the record a keep-alive worker writes when it has
// released a lease: the lease (Value, hex id), how long it was held
// (HeldNs, the hold ending at TimeNs, before the release), the renewal interval the client promises for it (IntervalNs:
// client.Config.KeepAliveInterval, by default a third of the ttl), and
// the renewals sent for it and the keep-alive streams opened while it was
// held (Renewals, Streams). It carries no Lease, so no other checker
// takes it for an operation on the lease.
const OpKeepAlive = "keepalive"

// NameRenewals is the checker of the keep-alive counts.
const NameRenewals = "renewals-bounded"

// Anomalies of renewals-bounded: a lease held across idle gaps was renewed
// more often than its client promises, or its keep-alive stream was
// reopened although no fault broke it.
const (
	AnomalyTooManyRenewals = "too-many-renewals"
	AnomalyStreamChurn     = "keep-alive-stream-reopened"
)

// NameKeepAliveKept is the checker that keep-alive leases live on.
const NameKeepAliveKept = "keepalive-leases-kept"

// AnomalyKeepAliveLost: a keep-alive lease ended while its holder held it
// and kept it alive, with no fault that could take it, or only faults
// under which the cluster goes on committing (keptKinds).
const AnomalyKeepAliveLost = "keep-alive-lease-lost"

// keptKinds are the faults under which a keep-alive lease must live on:
// the nodes stay up, connected and answering, and only commit late
// (history.NemSlowDisk: 1.8–4.4 s per commit, against the 6.4 s a
// renewal sent at a third of a 10 s ttl has left).
var keptKinds = map[string]bool{history.NemSlowDisk: true}

// CheckKeepAliveKept checks that no keep-alive lease ended while held
// (an OpKeepAlive record failed) when its hold overlapped no fault, or
// only faults of keptKinds (each with settleAfterHeal after its heal). A
// lease is the client's to keep alive: over a cluster that commits, late
// or not, its renewals must be confirmed before its ttl runs out.
func CheckKeepAliveKept(h []history.Record, faults []history.Fault) Result {
	f := NewFinding(NameKeepAliveKept)
	spans := heldSpans(faults)
	for _, r := range h {
		if r.Type != OpKeepAlive || r.Kind != history.Complete {
			continue
		}
		from, other, kept := r.TimeNs-r.HeldNs, false, []string{}
		for _, sp := range spans {
			if sp.end < from || sp.start > r.TimeNs {
				continue
			}
			if keptKinds[sp.kind] {
				kept = append(kept, sp.kind)
			} else {
				other = true
			}
		}
		if other {
			continue
		}
		f.R.Checked++
		if r.Result != history.OK {
			during := "no fault"
			if len(kept) > 0 {
				during = strings.Join(kept, ", ")
			}
			f.Invalid(AnomalyKeepAliveLost, "%s's lease %s on %q ended %v into its hold, during %s: %s",
				r.Worker, short(r.Value), r.Resource, time.Duration(r.HeldNs).Round(time.Millisecond), during, r.Error)
		}
	}
	return f.Done("keep-alive lease held without a fault, or only through faults the cluster commits under")
}

// StreamsPerHold bounds the keep-alive streams opened for one hold without
// a fault: the one the acquire opens, and one more for a stream the node
// closed on its own (a leadership change without a fault of ours).
const StreamsPerHold = 2

// RenewalSlack is how far above the ideal count (held time / interval) the
// renewals of one lease may go: 20 %, plus one for where the hold starts
// and ends between two renewals.
const RenewalSlack = 1.2

// CheckRenewalsBounded checks the keep-alive workload's counts: a lease
// held for H with a renewal interval I is renewed at most
// RenewalSlack × H / I + 1 times, and over at most StreamsPerHold
// keep-alive streams. A lease whose hold overlaps a fault is
// not checked (a failed renewal is retried sooner, by design), nor one
// that ended while held.
func CheckRenewalsBounded(h []history.Record, faults []history.Fault) Result {
	f := NewFinding(NameRenewals)
	for _, r := range keepAliveHolds(h, faults) {
		f.R.Checked++
		ideal := float64(r.HeldNs) / float64(r.IntervalNs)
		if float64(r.Renewals) > RenewalSlack*ideal+1 {
			f.Invalid(AnomalyTooManyRenewals, "%s's lease %s on %q held %v with a renewal interval of %v: %d renewals sent, ideal %.1f (bound %.1f)",
				r.Worker, short(r.Value), r.Resource, time.Duration(r.HeldNs).Round(time.Millisecond), time.Duration(r.IntervalNs),
				r.Renewals, ideal, RenewalSlack*ideal+1)
		}
		if r.Streams > StreamsPerHold {
			f.Invalid(AnomalyStreamChurn, "%s's lease %s on %q held %v without a fault: %d keep-alive streams opened (at most %d)",
				r.Worker, short(r.Value), r.Resource, time.Duration(r.HeldNs).Round(time.Millisecond), r.Streams, StreamsPerHold)
		}
	}
	return f.Done("lease held across idle gaps without a fault")
}

// KeepAliveSummary describes the keep-alive workload's holds without a
// fault: how many, renewals sent against the ideal, streams opened.
func KeepAliveSummary(h []history.Record, faults []history.Fault) string {
	holds := keepAliveHolds(h, faults)
	if len(holds) == 0 {
		return "no hold without a fault"
	}
	renewals, streams := 0, 0
	ideal, worst := 0.0, 0.0
	for _, r := range holds {
		i := float64(r.HeldNs) / float64(r.IntervalNs)
		renewals, streams, ideal = renewals+r.Renewals, streams+r.Streams, ideal+i
		worst = max(worst, float64(r.Renewals)/max(i, 1))
	}
	return fmt.Sprintf("%d holds without a fault: %d renewals sent, ideal %.1f (%.2f×, worst hold %.2f×); %d keep-alive streams opened",
		len(holds), renewals, ideal, float64(renewals)/max(ideal, 1), worst, streams)
}

// keepAliveHolds returns the OpKeepAlive records of leases held to their
// release without a fault overlapping the hold.
func keepAliveHolds(h []history.Record, faults []history.Fault) []history.Record {
	type span struct{ from, to int64 }
	var spans []span
	open := map[string]int64{}
	for _, x := range faults {
		key := x.Kind + "/" + x.Target
		switch x.Phase {
		case "start":
			open[key] = x.TimeNs
		case "heal":
			if s, ok := open[key]; ok {
				spans = append(spans, span{s, x.TimeNs})
				delete(open, key)
			}
		}
	}
	for _, s := range open {
		spans = append(spans, span{s, math.MaxInt64})
	}
	var out []history.Record
	for _, r := range h {
		if r.Type != OpKeepAlive || r.Kind != history.Complete || r.Result != history.OK || r.IntervalNs <= 0 {
			continue
		}
		from := r.TimeNs - r.HeldNs
		hit := false
		for _, s := range spans {
			hit = hit || (s.from < r.TimeNs && s.to > from)
		}
		if !hit {
			out = append(out, r)
		}
	}
	return out
}
