package checker

import "github.com/leasefence/leasefence/jepsen/history"

// The restore nemesis's checker (nemesis/restore.go).

// OpProbeWrite is history.OpProbeWrite, the probe's fenced write.
const OpProbeWrite = history.OpProbeWrite

// NameRestore is the checker of a restore: CheckRestore.
const NameRestore = "restore-beats-lost-tokens"

// Anomalies of CheckRestore.
const (
	AnomalyTokenNotAboveLoss = "token-not-above-loss"
	AnomalyNewHolderRefused  = "new-holder-refused"
)

// CheckRestore checks each NemRestore fault of faults against the history
// (DESIGN.md "Data model", token): every acquire invoked after the new
// cluster serves (the fault's heal), until the next restore, got a token
// above every token acknowledged in its scope before the loss (the fault's
// start), and fencedkv accepted the restore probe's writes after the
// restore, made under new grants in scopes that had accepted tokens before
// the loss. Acquires in flight across the loss are left out (which cluster
// granted them is unknown).
func CheckRestore(h []history.Record, faults []history.Fault) Result {
	f := NewFinding(NameRestore)
	type span struct{ lost, served int64 }
	var spans []span
	for _, ft := range faults {
		if !history.IsRestore(ft.Kind) {
			continue
		}
		switch {
		case ft.Phase == "start":
			spans = append(spans, span{lost: ft.TimeNs})
		case ft.Phase == "heal" && len(spans) > 0:
			if ft.Effective {
				spans[len(spans)-1].served = ft.TimeNs
			} else {
				spans = spans[:len(spans)-1] // no new cluster: nothing restored
			}
		}
	}
	if len(spans) == 0 {
		f.Unknown("no restore completed")
		return f.R
	}
	invokes := map[string]history.Record{}
	for _, r := range h {
		if r.Kind == history.Invoke {
			invokes[r.Op] = r
		}
	}
	for i, sp := range spans {
		if sp.served == 0 {
			f.Unknown("restore %d has no heal", i+1)
			continue
		}
		until := int64(1<<63 - 1)
		if i+1 < len(spans) {
			until = spans[i+1].lost
		}
		lost := map[string]uint64{} // scope -> highest token acknowledged before the loss
		for _, r := range h {
			if r.Kind == history.Complete && r.Type == history.OpAcquire && r.Result == history.OK && r.TimeNs < sp.lost {
				lost[r.Resource] = max(lost[r.Resource], r.Token)
			}
		}
		for _, r := range h {
			if r.Kind != history.Complete || r.Result == "" {
				continue
			}
			inv, ok := invokes[r.Op]
			if !ok || inv.TimeNs <= sp.served || r.TimeNs >= until {
				continue
			}
			switch {
			case r.Type == history.OpAcquire && r.Result == history.OK:
				before, seen := lost[r.Resource]
				if !seen {
					continue
				}
				f.R.Checked++
				if r.Token <= before {
					f.Invalid(AnomalyTokenNotAboveLoss, "restore %d: %s by %s got token %d in %q, which had acknowledged token %d before the loss",
						i+1, r.Op, r.Worker, r.Token, r.Resource, before)
				}
			case r.Type == OpProbeWrite && r.Worker == "restore":
				f.R.Checked++
				switch r.Result {
				case history.Fail:
					f.Invalid(AnomalyNewHolderRefused, "restore %d: fencedkv refused %s, a write in %q under token %d granted after the restore: %s",
						i+1, r.Op, r.Resource, inv.Token, r.Error)
				case history.Unknown:
					f.Unknown("restore %d: the outcome of %s is unknown: %s", i+1, r.Op, r.Error)
				}
			}
		}
	}
	return f.Done("acquire after a restore in a scope granted before the loss")
}

// WithRestoreCheck appends CheckRestore to rs when a restore was enabled.
func WithRestoreCheck(nemeses []string, rs []Result, h []history.Record, faults []history.Fault) []Result {
	for _, k := range nemeses {
		if history.IsRestore(k) {
			return append(rs, CheckRestore(h, faults))
		}
	}
	return rs
}
