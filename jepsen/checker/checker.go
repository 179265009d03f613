package checker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/history"
)

// Verdicts of a checker: Valid, Invalid, or Unknown ("unknown", shared
// with the result of an operation). Unknown never counts as a pass.
const (
	Valid   = "valid"
	Invalid = "invalid"
)

// Names of the checkers (DESIGN.md "What is checked": 1, 2, 4, 5, and the
// final read).
const (
	NameFencedTokens   = "fenced-tokens-monotonic" // 1
	NameTokens         = "tokens-unique-monotonic" // 2
	NameGrantIntervals = "grant-intervals-exclusive"
	NameSafeWindows    = "safe-windows-disjoint"
	NameFinalRead      = "fenced-updates-intact"
	NameDurable        = "acknowledged-ops-durable" // 3
	NameRequestIDs     = "request-id-identity"
)

// Anomalies a checker names in an invalid Result.
const (
	AnomalyStaleWriteAccepted    = "stale-write-accepted"
	AnomalyTokenReused           = "token-reused"
	AnomalyLeaseIDReused         = "lease-id-reused"
	AnomalyTokenRegression       = "token-regression"
	AnomalyOverlappingGrants     = "overlapping-grants"
	AnomalyRenewAfterExpiry      = "renew-after-expiry"
	AnomalyEarlyExpiry           = "early-expiry"
	AnomalyAckedGrantMissing     = "acknowledged-grant-missing"
	AnomalyAckedRenewLost        = "acknowledged-renew-lost"
	AnomalyAckedReleaseLost      = "acknowledged-release-lost"
	AnomalyOverlappingSafeWindow = "overlapping-safe-windows"
	AnomalyLostUpdate            = "lost-update"
	AnomalyDuplicatedUpdate      = "duplicated-update"
	AnomalyPhantomUpdate         = "phantom-update"
	AnomalyReplayAcrossParams    = "request-id-replayed-across-parameters"
	AnomalySecondGrantForRequest = "second-grant-for-one-request"
)

// Result is one checker's verdict over a run.
type Result struct {
	Checker string `json:"checker"`
	Verdict string `json:"verdict"`
	// Anomaly names what an invalid verdict found.
	Anomaly string `json:"anomaly,omitempty"`
	// Witness is the smallest evidence found (invalid), or why the checker
	// could not decide (unknown).
	Witness string `json:"witness,omitempty"`
	// Checked counts what the checker looked at (records, leases, ...);
	// a valid verdict over nothing is reported unknown.
	Checked int `json:"checked"`
	// Anomalies counts every violation found, the witness being the first.
	Anomalies int `json:"anomalies,omitempty"`
	// NotRequired, when set, says why this result does not decide the run
	// (ReasonClockRate): it is checked, printed and recorded as usual, but
	// an invalid or unknown verdict counts neither as a pass nor as a
	// failure. Empty means required (every result, unless MarkRequired
	// says otherwise).
	NotRequired string `json:"not_required,omitempty"`
}

// Required reports whether the result decides the run.
func (r Result) Required() bool { return r.NotRequired == "" }

// VerdictText is the verdict, followed for a non-required result that is
// not valid by why it does not count: "invalid (not required: out-of-spec
// clock rate)".
func (r Result) VerdictText() string {
	if r.Required() || r.Verdict == Valid {
		return r.Verdict
	}
	return r.Verdict + " (not required: " + r.NotRequired + ")"
}

func (r Result) String() string {
	s := fmt.Sprintf("%-26s %-8s checked %d", r.Checker, r.VerdictText(), r.Checked)
	if !r.Required() && r.Verdict == Valid {
		s += " (not required: " + r.NotRequired + ")"
	}
	if r.Anomaly != "" {
		s += fmt.Sprintf(", %d× %s", r.Anomalies, r.Anomaly)
	}
	if r.Witness != "" {
		s += ": " + r.Witness
	}
	return s
}

// Finding builds one checker's Result: the first anomaly found is its
// witness, later ones are counted; R.Checked counts what was checked.
type Finding struct {
	R Result
}

// Invalid records an anomaly.
func (f *Finding) Invalid(anomaly, format string, args ...any) {
	f.R.Anomalies++
	if f.R.Verdict == Invalid {
		return
	}
	f.R.Verdict, f.R.Anomaly, f.R.Witness = Invalid, anomaly, fmt.Sprintf(format, args...)
}

// Unknown makes the verdict unknown unless an anomaly was found.
func (f *Finding) Unknown(format string, args ...any) {
	if f.R.Verdict == Invalid || f.R.Verdict == history.Unknown {
		return
	}
	f.R.Verdict, f.R.Witness = history.Unknown, fmt.Sprintf(format, args...)
}

// Done returns the Result: unknown when nothing was checked.
func (f *Finding) Done(what string) Result {
	if f.R.Verdict == Valid && f.R.Checked == 0 {
		f.R.Verdict, f.R.Witness = history.Unknown, "nothing to check: no "+what
	}
	return f.R
}

// NewFinding starts a valid Result of checker name.
func NewFinding(name string) *Finding { return &Finding{R: Result{Checker: name, Verdict: Valid}} }

// CheckFencedTokensMonotonic is property 1: at the fenced resource, the
// tokens of accepted writes never decrease per scope (audit log order).
// strict demands they strictly increase.
func CheckFencedTokensMonotonic(audit []fencekv.AuditRecord, strict bool) Result {
	f := NewFinding(NameFencedTokens)
	recs := append([]fencekv.AuditRecord(nil), audit...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	type top struct {
		token, seq uint64
	}
	highest := map[string]top{}
	for _, r := range recs {
		if r.Outcome != fencekv.OutcomeAccepted {
			continue
		}
		f.R.Checked++
		scope := r.Scope
		if scope == "" {
			scope = r.Key
		}
		h, seen := highest[scope]
		if seen && (r.Token < h.token || (strict && r.Token == h.token)) {
			f.Invalid(AnomalyStaleWriteAccepted, "scope %q: audit #%d accepted %s token %d after #%d had accepted token %d (fenced=%v)",
				scope, r.Seq, r.Op, r.Token, h.seq, h.token, r.Fenced)
			continue
		}
		if !seen || r.Token > h.token {
			highest[scope] = top{r.Token, r.Seq}
		}
	}
	return f.Done("accepted write in the audit log")
}

// grant is one lease known from the history: an acknowledged acquire or a
// granted event.
type grant struct {
	scope, lease, worker, op string
	token                    uint64
	invoke, complete         int64
	fromEvent                bool
}

// CheckTokensUniqueMonotonic is property 2: no two leases in a scope share
// a token, and tokens never regress: an acquire invoked after another
// acquire of the same scope completed gets a higher token. Leases come
// from acknowledged acquires and from the watcher's granted events; the
// scope of a lease is its resource (the harness uses default scopes).
func CheckTokensUniqueMonotonic(h []history.Record) Result {
	f := NewFinding(NameTokens)
	invokes := map[string]history.Record{}
	var acks []grant
	byToken := map[string]grant{}
	byLease := map[string]grant{}
	note := func(g grant) {
		if o, ok := byLease[g.lease]; ok && g.lease != "" && (o.token != g.token || o.scope != g.scope) {
			f.Invalid(AnomalyLeaseIDReused, "lease id %s names two leases: scope %q token %d (%s) and scope %q token %d (%s)",
				short(g.lease), o.scope, o.token, o.describe(), g.scope, g.token, g.describe())
		} else if g.lease != "" {
			byLease[g.lease] = g
		}
		k := g.scope + "\x00" + strconv.FormatUint(g.token, 10)
		if o, ok := byToken[k]; ok && o.lease != g.lease {
			f.Invalid(AnomalyTokenReused, "scope %q token %d given to lease %s (%s) and lease %s (%s)",
				g.scope, g.token, short(o.lease), o.describe(), short(g.lease), g.describe())
			return
		}
		byToken[k] = g
	}
	for _, r := range h {
		switch {
		case r.Type == history.OpAcquire && r.Kind == history.Invoke:
			invokes[r.Op] = r
		case r.Type == history.OpAcquire && r.Kind == history.Complete && r.Result == history.OK:
			inv, ok := invokes[r.Op]
			if !ok {
				f.Unknown("acquire %s completed without an invocation", r.Op)
				continue
			}
			g := grant{scope: r.Resource, lease: r.Lease, worker: r.Worker, op: r.Op, token: r.Token, invoke: inv.TimeNs, complete: r.TimeNs}
			if r.ResolvedFrom != "" {
				g.complete = history.NeverReturned // took effect after its invocation, when is unknown
			}
			f.R.Checked++
			acks = append(acks, g)
			note(g)
		case r.Type == history.OpEvent && r.Event == "granted":
			f.R.Checked++
			note(grant{scope: r.Resource, lease: r.Lease, token: r.Token, fromEvent: true, op: r.Position})
		}
	}
	// Regression: for each scope, scan acquires by invocation time while
	// folding in those completed before it.
	byScope := map[string][]grant{}
	for _, g := range acks {
		byScope[g.scope] = append(byScope[g.scope], g)
	}
	for _, gs := range byScope {
		byComplete := append([]grant(nil), gs...)
		sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].complete < byComplete[j].complete })
		byInvoke := append([]grant(nil), gs...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].invoke < byInvoke[j].invoke })
		var best *grant
		j := 0
		for _, b := range byInvoke {
			for j < len(byComplete) && byComplete[j].complete < b.invoke {
				if best == nil || byComplete[j].token > best.token {
					g := byComplete[j]
					best = &g
				}
				j++
			}
			if best != nil && b.token <= best.token && b.lease != best.lease {
				f.Invalid(AnomalyTokenRegression, "scope %q: %s got token %d, but %s had completed with token %d before it was invoked",
					b.scope, b.describe(), b.token, best.describe(), best.token)
			}
		}
	}
	return f.Done("acknowledged acquire")
}

func (g grant) describe() string {
	if g.fromEvent {
		return "granted event at " + g.op
	}
	return fmt.Sprintf("acquire %s by %s", g.op, g.worker)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// CheckGrantIntervals is property 4, from the lease events of the
// replicated log (the watcher's records): on one resource, a lease is
// granted only after the previous one was released, or strictly after its
// last expires_at plus skewMargin, in cluster time (the FSM refuses while
// now <= expires_at + margin); a lease is expired only strictly after that
// bound too; a renewal comes no later than expires_at, and only for the
// resource's current, unreleased lease. It also requires every acknowledged acquire to
// appear as a granted event (an acknowledged grant the cluster lost). A gap
// in the watch stream makes the verdict unknown unless an anomaly is found.
func CheckGrantIntervals(h []history.Record, skewMargin time.Duration) Result {
	f := NewFinding(NameGrantIntervals)
	var events []history.Record
	var gapAt []string // the last position seen before each gap
	for _, r := range h {
		switch r.Type {
		case history.OpEvent:
			events = append(events, r)
		case history.OpWatchGap:
			gapAt = append(gapAt, r.Position)
		}
	}
	gaps := len(gapAt)
	// gapBetween reports whether events after from and before to may be
	// missing: a gap began at or after from and before to (a gap without
	// a position may lie anywhere).
	gapBetween := func(from, to string) bool {
		for _, g := range gapAt {
			if g == "" || (!positionLess(g, from) && positionLess(g, to)) {
				return true
			}
		}
		return false
	}
	sort.SliceStable(events, func(i, j int) bool { return positionLess(events[i].Position, events[j].Position) })
	type cur struct {
		lease     string
		token     uint64
		expiresAt int64
		endedAt   int64 // cluster time of release; 0 while live
		expired   bool
		pos       string // the lease's grant event
		last      string // the lease's last event seen
	}
	live := map[string]*cur{}
	granted := map[string]bool{}
	for _, e := range events {
		c := live[e.Resource]
		switch e.Event {
		case "granted":
			f.R.Checked++
			granted[e.Lease] = true
			// Whether the previous lease was then removed by expiry or not,
			// a new grant must come after its release or its bound.
			if c != nil && c.lease != e.Lease {
				if c.endedAt == 0 && !c.expired && gapBetween(c.last, e.Position) {
					// The previous lease's release or expiry may be in the gap.
					f.Unknown("resource %q: token %d granted at %s (event %s) with token %d's end not seen (watch gap after %s)",
						e.Resource, e.Token, ct(e.GrantedAt), e.Position, c.token, c.last)
					live[e.Resource] = &cur{lease: e.Lease, token: e.Token, expiresAt: e.ExpiresAt, pos: e.Position, last: e.Position}
					continue
				}
				switch {
				case c.endedAt != 0 && e.GrantedAt < c.endedAt:
					f.Invalid(AnomalyOverlappingGrants, "resource %q: token %d granted at %s, before token %d was released at %s",
						e.Resource, e.Token, ct(e.GrantedAt), c.token, ct(c.endedAt))
				case c.endedAt == 0 && e.GrantedAt <= c.expiresAt+int64(skewMargin):
					f.Invalid(AnomalyOverlappingGrants, "resource %q: token %d granted at %s (event %s) while token %d (granted event %s) ran to %s + margin %v",
						e.Resource, e.Token, ct(e.GrantedAt), e.Position, c.token, c.pos, ct(c.expiresAt), skewMargin)
				}
			}
			live[e.Resource] = &cur{lease: e.Lease, token: e.Token, expiresAt: e.ExpiresAt, pos: e.Position, last: e.Position}
		case "renewed":
			if c == nil || c.lease != e.Lease || c.endedAt != 0 || c.expired {
				// Not the resource's current live lease: its renewal must
				// have been refused. Over a gap in the stream the lease's
				// own grant may be missing (a watcher that resumes after a
				// gap sees renewals of a lease granted inside it), so a
				// renewal of a lease never seen granted is then undecided.
				if gaps > 0 && !granted[e.Lease] {
					f.Unknown("resource %q: renewal of token %d with no grant seen (watch gaps)", e.Resource, e.Token)
					continue
				}
				f.Invalid(AnomalyRenewAfterExpiry, "resource %q: token %d (lease %s) renewed at %s (event %s), but it is not the resource's live lease",
					e.Resource, e.Token, short(e.Lease), ct(e.ClusterNow), e.Position)
				continue
			}
			if e.ClusterNow > c.expiresAt {
				if gapBetween(c.last, e.Position) {
					// A renewal that extended it may be in the gap.
					f.Unknown("resource %q: token %d renewed at %s, after the expiry %s last seen (watch gap after %s)", e.Resource, e.Token, ct(e.ClusterNow), ct(c.expiresAt), c.last)
				} else {
					f.Invalid(AnomalyRenewAfterExpiry, "resource %q: token %d renewed at %s, after it expired at %s", e.Resource, e.Token, ct(e.ClusterNow), ct(c.expiresAt))
				}
			}
			c.expiresAt = e.ExpiresAt
			c.last = e.Position
		case "released":
			if c != nil && c.lease == e.Lease && c.endedAt == 0 {
				c.endedAt = e.ClusterNow
			}
		case "expired":
			if c != nil && c.lease == e.Lease {
				if c.endedAt == 0 && e.ClusterNow <= c.expiresAt+int64(skewMargin) {
					f.Invalid(AnomalyEarlyExpiry, "resource %q: token %d expired at %s (event %s), not after its expiry %s + margin %v",
						e.Resource, e.Token, ct(e.ClusterNow), e.Position, ct(c.expiresAt), skewMargin)
				}
				c.expired = true
			}
		}
	}
	for _, r := range h {
		if r.Type == history.OpAcquire && r.Kind == history.Complete && r.Result == history.OK && r.Lease != "" && !granted[r.Lease] {
			if gaps > 0 {
				f.Unknown("acquire %s (token %d) not seen as granted, but the watch stream had %d gap(s)", r.Op, r.Token, gaps)
				continue
			}
			f.Invalid(AnomalyAckedGrantMissing, "acquire %s by %s was acknowledged with token %d, lease %s, but no granted event exists for it",
				r.Op, r.Worker, r.Token, short(r.Lease))
		}
	}
	if gaps > 0 {
		f.Unknown("the watch stream had %d gap(s): events may be missing", gaps)
	}
	return f.Done("granted event")
}

func ct(ns int64) string { return time.Duration(ns).String() }

func positionLess(a, b string) bool {
	ai, as := parsePosition(a)
	bi, bs := parsePosition(b)
	return ai < bi || (ai == bi && as < bs)
}

func parsePosition(p string) (uint64, uint64) {
	i, s, _ := strings.Cut(p, ".")
	x, _ := strconv.ParseUint(i, 10, 64)
	y, _ := strconv.ParseUint(s, 10, 64)
	return x, y
}

// Window is a holder's client safe window on the shared clock.
type Window struct {
	Resource, Lease, Worker string
	Token                   uint64
	Start, End              int64
	Closed                  bool
}

// SafeWindows computes each acknowledged lease's client safe window from
// the history: from the acquire's completion to the earlier of the release
// invocation and the latest safe_until the holder's client library
// reported (a window still open at the end of the history ends at the last
// safe_until seen).
func SafeWindows(h []history.Record) []Window {
	byLease := map[string]*Window{}
	var order []string
	for _, r := range h {
		if r.Lease == "" || r.Worker == "" || r.Type == history.OpEvent || r.Type == history.OpRead || r.ResolvedFrom != "" {
			continue // a resolved acquire: the client never had the lease, so no Window
		}
		// A lease is its id and its token (a broken server might reuse ids).
		key := r.Lease + "#" + strconv.FormatUint(r.Token, 10)
		w := byLease[key]
		if r.Type == history.OpAcquire && r.Kind == history.Complete && r.Result == history.OK {
			w = &Window{Resource: r.Resource, Lease: r.Lease, Worker: r.Worker, Token: r.Token, Start: r.TimeNs, End: r.SafeUntilNs}
			byLease[key] = w
			order = append(order, key)
			continue
		}
		if w == nil {
			continue
		}
		if r.SafeUntilNs > w.End {
			w.End = r.SafeUntilNs
		}
		if r.Type == history.OpRelease && r.Kind == history.Invoke {
			w.Closed = true
			if r.TimeNs < w.End {
				w.End = r.TimeNs
			}
		}
	}
	var out []Window
	for _, id := range order {
		out = append(out, *byLease[id])
	}
	return out
}

// CheckSafeWindowsDisjoint is property 5: the client safe windows of
// successive holders of a resource never overlap in real time.
func CheckSafeWindowsDisjoint(h []history.Record) Result {
	f := NewFinding(NameSafeWindows)
	byRes := map[string][]Window{}
	for _, w := range SafeWindows(h) {
		if w.End <= w.Start { // empty: the holder never had a safe moment
			continue
		}
		byRes[w.Resource] = append(byRes[w.Resource], w)
	}
	res := make([]string, 0, len(byRes))
	for r := range byRes {
		res = append(res, r)
	}
	sort.Strings(res)
	for _, r := range res {
		ws := byRes[r]
		sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
		f.R.Checked += len(ws)
		var prev *Window
		for i := range ws {
			w := ws[i]
			if prev != nil && w.Start < prev.End {
				f.Invalid(AnomalyOverlappingSafeWindow, "resource %q: %s's window with token %d [%s, %s] overlaps %s's with token %d [%s, %s] by %v",
					r, prev.Worker, prev.Token, rt(prev.Start), rt(prev.End), w.Worker, w.Token, rt(w.Start), rt(w.End), time.Duration(prev.End-w.Start))
			}
			if prev == nil || w.End > prev.End {
				prev = &ws[i]
			}
		}
	}
	return f.Done("safe window")
}

func rt(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// ElementSep separates the elements of a key's value.
const ElementSep = " "

// Elements splits a value into its elements.
func Elements(v string) []string { return strings.Fields(v) }

// CheckFinalRead checks the final read of every written key against the
// writes of the history: each acknowledged element is present exactly
// once (else lost-update or duplicated-update), an element whose write
// failed or was never invoked is absent (else phantom-update), and an
// element whose write is unknown appears at most once.
func CheckFinalRead(h []history.Record) Result {
	f := NewFinding(NameFinalRead)
	type wr struct {
		rec    history.Record
		result string
	}
	writes := map[string]*wr{} // by element
	var elems []string
	reads := map[string]history.Record{}
	for _, r := range h {
		switch {
		case r.Type == history.OpWrite && r.Kind == history.Invoke:
			writes[r.Element] = &wr{rec: r}
			elems = append(elems, r.Element)
		case r.Type == history.OpWrite && r.Kind == history.Complete:
			if w := writes[r.Element]; w != nil {
				w.result = r.Result
				w.rec.Token = r.Token
			}
		case r.Type == history.OpRead && r.Kind == history.Complete && r.Result == history.OK && r.Worker == "final":
			reads[r.Resource] = r // the last read of a key is the final one
		}
	}
	counts := map[string]map[string]int{}
	for key, rd := range reads {
		c := map[string]int{}
		for _, e := range Elements(rd.Value) {
			c[e]++
		}
		counts[key] = c
	}
	for _, e := range elems {
		w := writes[e]
		c, read := counts[w.rec.Resource]
		if !read {
			if w.result == history.OK {
				f.Unknown("no final read of %q, which has acknowledged writes", w.rec.Resource)
			}
			continue
		}
		n := c[e]
		switch {
		case w.result == history.OK && n == 0:
			f.R.Checked++
			f.Invalid(AnomalyLostUpdate, "%q: element %s acknowledged (%s by %s, token %d) but missing from the final read", w.rec.Resource, e, w.rec.Op, w.rec.Worker, w.rec.Token)
		case n > 1:
			f.R.Checked++
			f.Invalid(AnomalyDuplicatedUpdate, "%q: element %s (%s by %s) appears %d times in the final read", w.rec.Resource, e, w.rec.Op, w.rec.Worker, n)
		case w.result == history.Fail && n > 0:
			f.R.Checked++
			f.Invalid(AnomalyPhantomUpdate, "%q: element %s was refused (%s by %s, token %d) yet is in the final read", w.rec.Resource, e, w.rec.Op, w.rec.Worker, w.rec.Token)
		case w.result == history.OK:
			f.R.Checked++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		found := make([]string, 0, len(counts[key]))
		for e := range counts[key] {
			found = append(found, e)
		}
		sort.Strings(found)
		for _, e := range found {
			if w := writes[e]; w == nil || w.rec.Resource != key {
				f.Invalid(AnomalyPhantomUpdate, "%q: element %s in the final read was never written to it", key, e)
			}
		}
	}
	return f.Done("acknowledged write")
}

// CheckAll runs every checker over a run's history and fencedkv's audit.
func CheckAll(h []history.Record, audit []fencekv.AuditRecord, skewMargin time.Duration) []Result {
	return []Result{
		CheckFencedTokensMonotonic(audit, false),
		CheckTokensUniqueMonotonic(h),
		CheckGrantIntervals(h, skewMargin),
		CheckSafeWindowsDisjoint(h),
		CheckFinalRead(h),
		CheckAcknowledgedDurable(h),
		CheckLinearizable(h, 60*time.Second),
		CheckRequestIDs(h),
		CheckReadsSeeWatched(h),
	}
}

// CheckRequestIDs checks that a request id names one request (DESIGN.md,
// Acquire): an OpReuse that changed a parameter is never answered with a
// lease, and one request id never yields two different leases (an
// acquire's grant, and every identical duplicate answered with a lease,
// name the same lease; a duplicate of a grant that has ended is refused,
// never granted afresh).
func CheckRequestIDs(h []history.Record) Result {
	f := NewFinding(NameRequestIDs)
	granted := map[string]string{} // request id -> lease (api.FormatLeaseID)
	grantOp := map[string]string{}
	second := func(r history.Record, lease string) {
		f.Invalid(AnomalySecondGrantForRequest, "request id %s yielded lease %s (token %d) to %s %s by %s, after lease %s to %s",
			r.RequestID, short(lease), r.Token, r.Type, r.Op, r.Worker, short(granted[r.RequestID]), grantOp[r.RequestID])
	}
	for _, r := range h {
		if r.Kind != history.Complete || r.Result != history.OK || r.RequestID == "" || r.Type != history.OpAcquire || r.Lease == "" {
			continue
		}
		if prev, ok := granted[r.RequestID]; ok && prev != r.Lease {
			second(r, r.Lease)
			continue
		}
		granted[r.RequestID], grantOp[r.RequestID] = r.Lease, r.Op
	}
	for _, r := range h {
		if r.Type != history.OpReuse || r.Kind != history.Complete || r.Result == history.Unknown {
			continue
		}
		f.R.Checked++
		if r.Result != history.OK {
			continue
		}
		switch prev, ok := granted[r.RequestID]; {
		case r.Changed != "":
			f.Invalid(AnomalyReplayAcrossParams, "request id %s sent by %s with another %s (%s) was answered with lease %s (token %d)",
				r.RequestID, r.Worker, r.Changed, r.Op, short(r.Value), r.Token)
		case ok && prev != r.Value:
			second(r, r.Value)
		}
	}
	return f.Done("request-id reuse")
}

// CheckAcknowledgedDurable is property 3 for renewals and releases (the
// grants are checked by CheckGrantIntervals): every renewal acknowledged
// to an explicit Renew, and every release acknowledged as done, appears in
// the replicated log as a renewed / released event of that lease (id and
// token). A release through the client library counts only on the
// linearizability workload, whose leases never expire (the library's
// Release also succeeds on a lease that is already gone).
func CheckAcknowledgedDurable(h []history.Record) Result {
	f := NewFinding(NameDurable)
	seen := map[string]bool{} // event + lease + token
	gaps := 0
	invokes := map[string]history.Record{}
	for _, r := range h {
		switch {
		case r.Type == history.OpWatchGap:
			gaps++
		case r.Type == history.OpEvent:
			seen[r.Event+"/"+r.Lease+"/"+strconv.FormatUint(r.Token, 10)] = true
			seen[r.Event+"/"+r.Lease+"/"] = true // for an invocation that names no token
		case r.Kind == history.Invoke:
			invokes[r.Op] = r
		}
	}
	for _, r := range h {
		if r.Kind != history.Complete || r.Result != history.OK || r.ResolvedFrom != "" {
			continue
		}
		inv, ok := invokes[r.Op]
		if !ok || inv.Lease == "" {
			continue
		}
		var event, anomaly string
		switch {
		case r.Type == history.OpRenew:
			event, anomaly = "renewed", AnomalyAckedRenewLost
		case r.Type == history.OpRelease && (r.Value == history.Released || (r.Value == "" && strings.HasPrefix(r.Resource, LinPrefix))):
			event, anomaly = "released", AnomalyAckedReleaseLost
		default:
			continue
		}
		f.R.Checked++
		tok := ""
		if inv.Token != 0 {
			tok = strconv.FormatUint(inv.Token, 10)
		}
		if seen[event+"/"+inv.Lease+"/"+tok] {
			continue
		}
		if gaps > 0 {
			f.Unknown("%s %s (lease %s) not seen as %s, but the watch stream had %d gap(s)", r.Type, r.Op, short(inv.Lease), event, gaps)
			continue
		}
		f.Invalid(anomaly, "%s %s by %s of lease %s (token %d) on %q was acknowledged, but no %s event exists for it",
			r.Type, r.Op, r.Worker, short(inv.Lease), inv.Token, r.Resource, event)
	}
	return f.Done("acknowledged renewal or release")
}

// Tally counts passes (valid) and failures (invalid or unknown). A result
// that is not required and not valid counts as neither (see NotCounted).
func Tally(rs []Result) (passed, failed int) {
	for _, r := range rs {
		switch {
		case r.Verdict == Valid:
			passed++
		case r.Required():
			failed++
		}
	}
	return
}

// NotCounted counts the results Tally leaves out: not required and not
// valid.
func NotCounted(rs []Result) int {
	n := 0
	for _, r := range rs {
		if !r.Required() && r.Verdict != Valid {
			n++
		}
	}
	return n
}

// ReasonClockRate is why the exclusion checkers are not required in a run
// with clock-rate faults.
const ReasonClockRate = "out-of-spec clock rate"

// MarkRequired sets which results decide a run of these nemeses. With
// clock-rate faults enabled (a leader's monotonic clock at a rate far
// beyond the drift bound: out of spec), DESIGN.md no longer promises
// exclusion, so the exclusion checkers (grant-intervals-exclusive,
// safe-windows-disjoint) are reported but not required. The fencing
// checkers (fenced-tokens-monotonic, tokens-unique-monotonic,
// fenced-updates-intact), linearizability and the rest stay required: no
// clock fault may break them.
func MarkRequired(nemeses []string, rs []Result) {
	outOfSpec := false
	for _, k := range nemeses {
		outOfSpec = outOfSpec || k == history.NemClockRate || k == history.NemClockRateClientPause
	}
	for i := range rs {
		if outOfSpec && (rs[i].Checker == NameGrantIntervals || rs[i].Checker == NameSafeWindows) {
			rs[i].NotRequired = ReasonClockRate
		}
	}
	restoreRequired(nemeses, rs)
	driftEdgeRequired(nemeses, rs)
	slowDiskRequired(nemeses, rs)
	keepAliveKeptRequired(nemeses, rs)
}
