package cluster

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// statusPageLeases is the most leases the page lists; statusPageEvents the
// most recent watch events it shows.
const (
	statusPageLeases = 500
	statusPageEvents = 50
)

// statusPage is the data of the read-only HTML status page (/ and /status
// on the metrics listener, Config.StatusPage): what an operator looks at
// first. Everything is read when the page is asked for; nothing is cached.
type statusPage struct {
	Node, Addr, State, Leader string
	Term, Applied, Commit     uint64
	ClusterTime               string
	LiveLeases                int
	Members                   []pageMember
	Filter                    string
	Leases                    []pageLease
	Matched                   int
	Events                    []pageEvent
	Clock                     [][2]string
	Unsafe                    string
	Corrupt                   string
	Generated                 string
}

type pageMember struct {
	ID, Addr, Suffrage, Role string
	Term, Applied            uint64
	Reachable                bool
	Reach                    string // "self", "yes (3ms)" or why not
}

type pageLease struct {
	Resource, Scope, Holder, ID string
	Token                       uint64
	TimeLeft                    string
}

type pageEvent struct {
	Position, Type, Resource, Holder, Reason string
	Token                                    uint64
}

// memberProbeTimeout bounds the page's wait for one member's status.
const memberProbeTimeout = 1500 * time.Millisecond

// buildStatusPage gathers the page's data: this node's view, each other
// member's own status (asked in parallel; a member that does not answer
// is shown unreachable with the reason), the leases matching filter and
// the last watch events this node retains.
func (n *Node) buildStatusPage(ctx context.Context, filter string) (*statusPage, error) {
	self, err := n.admin.Status(ctx, &api.StatusRequest{})
	if err != nil {
		return nil, err
	}
	p := &statusPage{
		Node: self.GetId(), Addr: self.GetAddr(), State: self.GetState(),
		Leader: "none known", Term: self.GetTerm(), Applied: self.GetAppliedIndex(), Commit: self.GetCommitIndex(),
		Filter: filter, Unsafe: strings.Join(self.GetUnsafe(), ", "), Corrupt: self.GetStateCorrupt(),
		Generated: time.Now().UTC().Format(time.RFC3339),
	}
	if self.GetLeaderId() != "" {
		p.Leader = fmt.Sprintf("%s (%s)", self.GetLeaderId(), self.GetLeaderAddr())
	}
	p.Members = make([]pageMember, len(self.GetMembers()))
	var wg sync.WaitGroup
	for i, m := range self.GetMembers() {
		pm := &p.Members[i]
		pm.ID, pm.Addr, pm.Suffrage = m.GetId(), m.GetAddr(), m.GetSuffrage()
		if m.GetId() == self.GetId() {
			pm.Role, pm.Term, pm.Applied, pm.Reachable, pm.Reach = self.GetState(), self.GetTerm(), self.GetAppliedIndex(), true, "self"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			st, err := n.statusOf(ctx, m.GetAddr(), memberProbeTimeout)
			if status.Code(err) == codes.PermissionDenied {
				// It answered: up, but its policy does not know this node's
				// credentials (plaintext with a policy).
				pm.Role, pm.Reachable = "?", true
				pm.Reach = fmt.Sprintf("yes (%s; its status refused to this node)", time.Since(start).Round(time.Millisecond))
				return
			}
			if err != nil {
				pm.Role, pm.Reach = "?", "no: "+shortErr(err)
				return
			}
			pm.Role, pm.Term, pm.Applied, pm.Reachable = st.GetState(), st.GetTerm(), st.GetAppliedIndex(), true
			pm.Reach = fmt.Sprintf("yes (%s)", time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	sort.Slice(p.Members, func(i, j int) bool { return p.Members[i].ID < p.Members[j].ID })

	var leases []fsm.Lease
	var now int64
	n.sm.read(func(st *fsm.State) {
		now = st.Now()
		p.LiveLeases = st.Len()
		leases, p.Matched = st.Leases(filter, statusPageLeases)
	})
	p.ClusterTime = time.Duration(now).Round(time.Millisecond).String()
	for _, l := range leases {
		left := time.Duration(l.ExpiresAt - now)
		tl := left.Round(100 * time.Millisecond).String()
		if left <= 0 {
			tl = "expired (removal pending)"
		}
		p.Leases = append(p.Leases, pageLease{Resource: l.Resource, Scope: l.Scope, Holder: l.Holder,
			ID: api.FormatLeaseID(l.ID[:]), Token: l.Token, TimeLeft: tl})
	}
	for _, ev := range n.hub.recent(statusPageEvents) {
		l := ev.GetLease()
		p.Events = append(p.Events, pageEvent{
			Position: fmt.Sprintf("%d.%d", ev.GetPosition().GetIndex(), ev.GetPosition().GetSeq()),
			Type:     strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")),
			Resource: l.GetResource(), Holder: l.GetHolder(), Token: l.GetToken(), Reason: ev.GetReason(),
		})
	}
	p.Clock = [][2]string{
		{"min ttl", n.cfg.MinTTL.String()},
		{"max ttl", n.cfg.MaxTTL.String()},
		{"skew margin", n.cfg.SkewMargin.String()},
		{"drift", fmt.Sprint(n.cfg.Drift)},
		{"tick", n.cfg.Tick.String()},
		{"election timeout", n.cfg.ElectionTimeout.String()},
	}
	if fc := n.faultClock; fc != nil {
		p.Clock = append(p.Clock, [2]string{"fault clock (UNSAFE)", fmt.Sprintf("rate %v, wall offset %s", fc.Rate(), fc.WallOffset())})
	}
	return p, nil
}

// shortErr is an error's message without gRPC's "rpc error: code = ..."
// wrapping, cut to one short line.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.Index(s, "desc = "); i >= 0 {
		s = s[i+len("desc = "):]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// serveStatusPage is the handler of / and /status. With a policy only an
// administrator may see it: the request must carry "Authorization: Bearer
// <token>" of an identity with "admin": true (403 otherwise). The page is
// read-only; it takes one query parameter, resource, a prefix filter on
// the leases shown.
func (n *Node) serveStatusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" && r.URL.Path != "/status" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only page: GET only", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	if n.policy != nil {
		// authorize reads a caller from gRPC metadata and a peer: give it
		// the HTTP request's bearer token and remote address.
		actx := peer.NewContext(ctx, &peer.Peer{Addr: httpAddr(r.RemoteAddr)})
		if h := r.Header.Get("Authorization"); h != "" {
			actx = metadata.NewIncomingContext(actx, metadata.Pairs(authorizationKey, h))
		}
		if _, _, err := n.authorize(actx, permAdmin, ""); err != nil {
			http.Error(w, "status page: administrators only (send Authorization: Bearer <an admin's token>): "+err.Error(), http.StatusForbidden)
			return
		}
	}
	filter := r.URL.Query().Get("resource")
	if len(filter) > 256 {
		http.Error(w, "resource filter: at most 256 bytes", http.StatusBadRequest)
		return
	}
	p, err := n.buildStatusPage(ctx, filter)
	if err != nil {
		http.Error(w, "status page: "+shortErr(err), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := statusTemplate.Execute(w, p); err != nil {
		n.log.Warn("status page", "error", err)
	}
}

type httpAddr string

func (a httpAddr) Network() string { return "tcp" }
func (a httpAddr) String() string  { return string(a) }

var _ net.Addr = httpAddr("")

var statusTemplate = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>leasefence {{.Node}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:20px;margin:0 0 .2em}h2{font-size:16px;margin:1.4em 0 .4em}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}
th{background:#f3f3f3}.num{text-align:right}.no{color:#b00020}.yes{color:#1b7f3b}.note{color:#666}
code{font:12px ui-monospace,monospace}.warn{background:#fff3cd;padding:.4em}
</style></head><body>
<h1>leasefence node <span id="node">{{.Node}}</span></h1>
<p class="note">{{.Addr}} · state <b id="state">{{.State}}</b> · leader <b id="leader">{{.Leader}}</b> · term {{.Term}} · applied {{.Applied}} · commit {{.Commit}} · cluster time {{.ClusterTime}} · page made {{.Generated}} (reload to refresh; read-only)</p>
{{if .Corrupt}}<p class="warn">state found corrupt: {{.Corrupt}}</p>{{end}}
{{if .Unsafe}}<p class="warn">unsafe settings on: {{.Unsafe}}</p>{{end}}
<p class="note">This is node {{.Node}}'s view: a follower's leases and events may lag the leader's by a few entries.</p>

<h2>Members</h2>
<table id="members"><tr><th>id</th><th>address</th><th>suffrage</th><th>role</th><th class="num">term</th><th class="num">applied index</th><th>reachable from {{.Node}}</th></tr>
{{range .Members}}<tr data-member="{{.ID}}"><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{.Suffrage}}</td><td>{{.Role}}</td><td class="num">{{.Term}}</td><td class="num">{{.Applied}}</td><td class="{{if .Reachable}}yes{{else}}no{{end}}">{{.Reach}}</td></tr>
{{end}}</table>

<h2>Live leases</h2>
<form method="get" action="/status"><label>resource prefix <input name="resource" value="{{.Filter}}" size="30"></label> <button type="submit">filter</button></form>
<p class="note" id="lease-count">{{.Matched}} of {{.LiveLeases}} leases match{{if .Filter}} "{{.Filter}}"{{end}}{{if lt (len .Leases) .Matched}}; the first {{len .Leases}} shown{{end}}.</p>
<table id="leases"><tr><th>resource</th><th>scope</th><th class="num">token</th><th>holder</th><th>time left</th><th>lease id</th></tr>
{{range .Leases}}<tr data-resource="{{.Resource}}"><td>{{.Resource}}</td><td>{{.Scope}}</td><td class="num">{{.Token}}</td><td>{{.Holder}}</td><td>{{.TimeLeft}}</td><td><code>{{.ID}}</code></td></tr>
{{end}}</table>

<h2>Last events</h2>
<table id="events"><tr><th>position</th><th>event</th><th>resource</th><th class="num">token</th><th>holder</th><th>reason</th></tr>
{{range .Events}}<tr><td>{{.Position}}</td><td>{{.Type}}</td><td>{{.Resource}}</td><td class="num">{{.Token}}</td><td>{{.Holder}}</td><td>{{.Reason}}</td></tr>
{{else}}<tr><td colspan="6" class="note">none retained since this node started</td></tr>
{{end}}</table>

<h2>Clock settings</h2>
<table id="clock">{{range .Clock}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
<p class="note">A new holder is granted a resource only after the last lease's expiry plus the skew margin, in cluster time (docs/DESIGN.md, Time).</p>
</body></html>
`))
