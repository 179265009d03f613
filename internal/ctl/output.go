package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// roundDuration formats a measured duration for people: to the millisecond
// below a second, to a tenth of a second below a minute, to the second
// above. Negative durations print as 0s.
func roundDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func asDuration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// leaseView is the JSON form of api.Lease: the id as 32 hex characters and
// the ttl as a duration string. Instants stay cluster-time nanoseconds.
type leaseView struct {
	ID          string `json:"id"`
	Resource    string `json:"resource"`
	Scope       string `json:"scope"`
	Token       uint64 `json:"token"`
	Holder      string `json:"holder"`
	TTL         string `json:"ttl"`
	GrantedAtNs int64  `json:"granted_at_ns"`
	ExpiresAtNs int64  `json:"expires_at_ns"`
}

func viewLease(l *api.Lease) *leaseView {
	if l == nil {
		return nil
	}
	return &leaseView{
		ID:          api.FormatLeaseID(l.GetId()),
		Resource:    l.GetResource(),
		Scope:       l.GetScope(),
		Token:       l.GetToken(),
		Holder:      l.GetHolder(),
		TTL:         asDuration(l.GetTtl()).String(),
		GrantedAtNs: l.GetGrantedAtNs(),
		ExpiresAtNs: l.GetExpiresAtNs(),
	}
}

// leaseResult is the JSON form of an acquire or renew answer.
type leaseResult struct {
	Lease     *leaseView `json:"lease"`
	TimeLeft  string     `json:"time_left"`
	Replayed  bool       `json:"replayed"`
	RequestID string     `json:"request_id,omitempty"`
}

type getResult struct {
	Resource     string     `json:"resource"`
	Held         bool       `json:"held"`
	Lease        *leaseView `json:"lease"`
	TimeLeft     string     `json:"time_left,omitempty"`
	ScopeToken   uint64     `json:"scope_token"`
	AppliedIndex uint64     `json:"applied_index"`
	// Stale is set for a --stale read: the answer is node Node's local
	// state at AppliedIndex, which may lag the leader.
	Stale bool   `json:"stale,omitempty"`
	Node  string `json:"node,omitempty"`
}

type releaseResult struct {
	Released bool       `json:"released"`
	Lease    *leaseView `json:"lease"`
}

type memberView struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

func viewMembers(ms []*api.Member) []memberView {
	out := make([]memberView, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberView{ID: m.GetId(), Addr: m.GetAddr(), Suffrage: m.GetSuffrage(), Leader: m.GetLeader()})
	}
	return out
}

type statusResult struct {
	AnsweredBy    string       `json:"answered_by"`
	ID            string       `json:"id"`
	Addr          string       `json:"addr"`
	State         string       `json:"state"`
	LeaderID      string       `json:"leader_id"`
	LeaderAddr    string       `json:"leader_addr"`
	Term          uint64       `json:"term"`
	CommitIndex   uint64       `json:"commit_index"`
	AppliedIndex  uint64       `json:"applied_index"`
	LastLogIndex  uint64       `json:"last_log_index"`
	Members       []memberView `json:"members"`
	LiveLeases    uint64       `json:"live_leases"`
	ClusterTimeNs int64        `json:"cluster_time_ns"`
	SkewMargin    string       `json:"skew_margin"`
	Drift         float64      `json:"drift"`
	Tick          string       `json:"tick"`
	Version       string       `json:"version"`
	Unsafe        []string     `json:"unsafe,omitempty"`
	// TokenFloor is the cluster-wide token floor a restore raised (0: none).
	TokenFloor uint64 `json:"token_floor,omitempty"`
	// Served lists the nodes the cluster records as having served.
	Served []string `json:"served,omitempty"`
	// VotesHeld: the node refuses vote requests until its founders
	// answer whether it served before.
	VotesHeld    bool   `json:"votes_held,omitempty"`
	StateCorrupt string `json:"state_corrupt,omitempty"`
}

type eventView struct {
	Position string     `json:"position"`
	Index    uint64     `json:"index"`
	Seq      uint32     `json:"seq"`
	Type     string     `json:"type"`
	Reason   string     `json:"reason"`
	Resource string     `json:"resource"`
	Lease    *leaseView `json:"lease"`
	NowNs    int64      `json:"now_ns"`
}

// eventType names an event type in lower case: "granted", "expired".
func eventType(t api.EventType) string {
	name, ok := api.EventType_name[int32(t)]
	if !ok {
		return fmt.Sprintf("type-%d", int32(t))
	}
	return strings.ToLower(strings.TrimPrefix(name, "EVENT_TYPE_"))
}

// printJSON writes v as one line of JSON on stdout.
func (a *app) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(a.stderr, "leasectl: encoding JSON: %v\n", err)
		return
	}
	a.stdout.Write(append(b, '\n'))
}

// kv writes aligned "label value" rows.
type kv struct{ tw *tabwriter.Writer }

func newKV(w io.Writer) *kv { return &kv{tw: tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)} }

func (k *kv) row(label string, value any) { fmt.Fprintf(k.tw, "%s\t%v\n", label, value) }
func (k *kv) flush()                      { k.tw.Flush() }

func (k *kv) lease(l *api.Lease) {
	k.row("lease", api.FormatLeaseID(l.GetId()))
	k.row("resource", l.GetResource())
	k.row("scope", l.GetScope())
	k.row("token", l.GetToken())
	k.row("holder", l.GetHolder())
	k.row("ttl", asDuration(l.GetTtl()))
}

// printLease prints an acquire or renew answer.
func (a *app) printLease(l *api.Lease, left time.Duration, replayed bool, requestID string) {
	if a.json {
		a.printJSON(leaseResult{Lease: viewLease(l), TimeLeft: roundDuration(left), Replayed: replayed, RequestID: requestID})
		return
	}
	k := newKV(a.stdout)
	k.lease(l)
	k.row("time left", roundDuration(left))
	if replayed {
		k.row("replayed", "true")
	}
	k.flush()
}

// report prints err (on stderr, or as JSON on stdout with --json) and
// returns the exit status for it. ctx is the command's parent context: if it
// was cancelled, the command was interrupted.
//
// An *annotatedError adds its fields to the JSON object and its note to
// stderr. The message and the status come from the first row of failures
// that matches err; the JSON "code" is the gRPC code of the last attempt.
func (a *app) report(ctx context.Context, err error) int {
	var extra map[string]any
	note := ""
	var ae *annotatedError
	if errors.As(err, &ae) {
		extra, note, err = ae.fields, ae.note, ae.err
	}
	f := classify(err)
	st := lastStatus(err)
	msg := f.say(err, st)
	code := f.exit
	if code < 0 {
		code = exitCode(st.Code())
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		code = ExitInterrupted
	}
	if a.tlsConfig == nil && closedBeforePreface(st.Message()) {
		// A TLS node closes a plaintext connection at once.
		note = strings.TrimPrefix(note+"\n"+tlsHint, "\n")
	}
	if a.json {
		jsonMsg := st.Message()
		if f.own {
			jsonMsg = strings.TrimPrefix(msg, "leasectl: ")
		}
		obj := map[string]any{"error": jsonMsg, "code": st.Code().String()}
		if f.reason != "" {
			obj["reason"] = f.reason
		}
		for k, v := range extra {
			obj[k] = v
		}
		var ce *client.CallError
		if errors.As(err, &ce) {
			obj["tried"] = ce.Tried
		}
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *api.ResourceHeld:
				obj["resource"] = d.GetResource()
				obj["holder"] = d.GetHolder()
				obj["token"] = d.GetToken()
				obj["time_left"] = roundDuration(asDuration(d.GetTimeLeft()))
			case *api.NotLeader:
				obj["leader_id"] = d.GetLeaderId()
				obj["leader_addr"] = d.GetLeaderAddr()
			case *api.BadField:
				obj["field"] = d.GetField()
				obj["limit"] = d.GetLimit()
			}
		}
		a.printJSON(obj)
	} else {
		fmt.Fprintln(a.stderr, msg)
	}
	if note != "" {
		fmt.Fprintln(a.stderr, note)
	}
	return code
}

// tlsHint follows an error where a node closed a plaintext connection
// before answering, as a node that speaks TLS does.
// closedBeforePreface reports whether a connection error says the node
// closed the connection before its HTTP/2 preface: EOF, or a reset when
// our bytes were still unread as it closed (which one the client sees
// depends on timing).
func closedBeforePreface(msg string) bool {
	_, why, ok := strings.Cut(msg, "error reading server preface: ")
	return ok && (strings.HasPrefix(why, "EOF") || strings.Contains(why, "connection reset by peer"))
}

const tlsHint = "leasectl: the node closed the connection before answering: it may speak TLS; pass --tls-ca FILE (with --tls-cert and --tls-key where it asks for a client certificate)"

// failure is how leasectl reports one class of error.
type failure struct {
	// is matches the class (errors.Is for a client sentinel: a new
	// sentinel is one more row).
	is func(error) bool
	// exit is the exit status; -1 means by the gRPC code (exitCode).
	exit int
	// say is the one-line message; st is the last attempt's status.
	say func(err error, st *status.Status) string
	// own: the JSON "error" is say's message, not the service's.
	own bool
	// reason, when set, goes in the JSON object as "reason", for scripts
	// that must tell the classes apart (the "code" is the last attempt's).
	reason string
}

// failures maps the client's errors to messages and exit statuses. The
// first row that matches wins; the last matches everything.
//
// "cluster unreachable" is said only when no node answered: a node that
// answered it knows no leader makes it "no leader/quorum"; a write sent
// without an answer is "outcome unknown".
var failures = []failure{
	{is: isA[*waitTimeoutError], exit: ExitRefused, say: sayOwn, own: true, reason: "timed_out_waiting"},
	{is: sentinel(client.ErrHeld), exit: ExitRefused, say: sayHeld},
	{is: isA[*invalidValue], exit: ExitFailed, say: sayOwn, own: true},
	{is: sentinel(client.ErrInvalidArgument), exit: ExitFailed, say: sayInvalid},
	{is: answeredNoLeader, exit: ExitFailed, say: sayNoLeader, own: true, reason: "no_leader"},
	{is: sentinel(client.ErrIndeterminate), exit: ExitFailed, say: sayUnknown, own: true, reason: "outcome_unknown"},
	{is: sentinel(client.ErrNoLeader), exit: ExitFailed, say: sayNoLeader, own: true, reason: "no_leader"},
	{is: sentinel(client.ErrUnavailable), exit: ExitFailed, say: sayUnreachable, own: true, reason: "unreachable"},
	{is: func(error) bool { return true }, exit: -1, say: sayStatus},
}

func isA[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}

// answeredNoLeader: a node answered that it knows no leader (an election
// under way, or no quorum).
func answeredNoLeader(err error) bool {
	var ce *client.CallError
	return errors.As(err, &ce) && ce.NoLeader
}

func sentinel(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func classify(err error) failure {
	for _, f := range failures {
		if f.is(err) {
			return f
		}
	}
	return failures[len(failures)-1]
}

// lastStatus is the status of the last attempt of a call (with the
// service's details), or err's own status when no call was made.
func lastStatus(err error) *status.Status {
	var ce *client.CallError
	if errors.As(err, &ce) && ce.Last != nil {
		return status.Convert(ce.Last)
	}
	return status.Convert(err)
}

func tried(err error) string {
	var ce *client.CallError
	if errors.As(err, &ce) {
		return strings.Join(ce.Tried, ", ")
	}
	return ""
}

func sayHeld(err error, st *status.Status) string {
	var h *client.HeldError
	if !errors.As(err, &h) {
		return sayStatus(err, st)
	}
	return fmt.Sprintf("held by %s (token %d), free in %s", h.Holder, h.Token, roundDuration(h.TimeLeft))
}

func sayInvalid(err error, st *status.Status) string {
	var ie *client.InvalidError
	if !errors.As(err, &ie) || ie.Field == "" {
		return sayStatus(err, st)
	}
	return fmt.Sprintf("leasectl: invalid %s: %s", ie.Field, mustBe(ie.Limit))
}

// invalidValue is an InvalidArgument about a value from the command line:
// it names the flag and the value given, and the limit, once.
type invalidValue struct {
	name, value, limit string
	err                error
}

func (e *invalidValue) Error() string {
	return fmt.Sprintf("invalid %s %s: %s", e.name, shellQuote(e.value), mustBe(e.limit))
}

func (e *invalidValue) Unwrap() error { return e.err }

// withValues turns an InvalidArgument about one of the request fields in
// given (field name → the value from the command line) into an
// *invalidValue; other errors pass unchanged.
func withValues(err error, given map[string]string) error {
	var ie *client.InvalidError
	if !errors.As(err, &ie) {
		return err
	}
	v, ok := given[ie.Field]
	if !ok {
		return err
	}
	name := "--" + strings.ReplaceAll(ie.Field, "_", "-")
	if ie.Field == "resource" {
		name = "resource"
	}
	return &invalidValue{name: name, value: v, limit: ie.Limit, err: err}
}

// mustBe phrases a limit from the service as a rule: "within [2s, 10m0s]"
// becomes "must be within [2s, 10m0s]".
func mustBe(limit string) string {
	if limit == "" || strings.HasPrefix(limit, "must") || strings.HasPrefix(limit, "required") {
		return limit
	}
	return "must be " + limit
}

func sayOwn(err error, _ *status.Status) string { return "leasectl: " + err.Error() }

func sayNoLeader(err error, _ *status.Status) string {
	return fmt.Sprintf("leasectl: no leader/quorum: a node answered that it knows no leader (an election is under way, or most nodes are down or cut off); tried %s", tried(err))
}

func sayUnknown(err error, st *status.Status) string {
	msg := fmt.Sprintf("leasectl: outcome unknown (tried %s)", tried(err))
	why := strings.TrimPrefix(strings.TrimPrefix(plainMessage(st.Message()), "outcome unknown"), ": ")
	if why != "" {
		msg += ": " + why
	}
	return msg
}

func sayUnreachable(err error, st *status.Status) string {
	return fmt.Sprintf("leasectl: cluster unreachable (tried %s): %s", tried(err), plainMessage(st.Message()))
}

// sayStatus says a service's answer without its package prefixes or raw
// gRPC code (the code in words where the message does not say it), and a
// local error (a file that cannot be written) as it is.
func sayStatus(err error, st *status.Status) string {
	if !isStatus(err) {
		return "leasectl: " + err.Error()
	}
	msg := plainMessage(st.Message())
	if w, ok := codeWords[st.Code()]; ok && !strings.Contains(strings.ToLower(msg), w) {
		msg = w + ": " + msg
	}
	return "leasectl: " + msg
}

// isStatus reports whether err came from a call (a node's answer or a
// transport failure) rather than from leasectl itself.
func isStatus(err error) bool {
	var ce *client.CallError
	if errors.As(err, &ce) {
		return true
	}
	_, ok := status.FromError(err)
	return ok
}

// codeWords says the gRPC codes a node answers with in words.
var codeWords = map[codes.Code]string{
	codes.PermissionDenied:   "permission denied",
	codes.Unauthenticated:    "not authenticated",
	codes.NotFound:           "not found",
	codes.AlreadyExists:      "already exists",
	codes.ResourceExhausted:  "limit reached",
	codes.FailedPrecondition: "refused",
	codes.DeadlineExceeded:   "timed out",
	codes.Canceled:           "interrupted",
	codes.Unimplemented:      "not supported by this node",
	codes.Internal:           "internal error on the node",
}

// plainMessage drops the package prefixes ("cluster: ", "fsm: ") from the
// front of a node's message.
func plainMessage(msg string) string {
	for {
		word, rest, ok := strings.Cut(msg, ": ")
		if !ok || !packagePrefix[word] {
			return msg
		}
		msg = rest
	}
}

var packagePrefix = map[string]bool{"cluster": true, "fsm": true, "client": true, "transport": true, "fence": true, "leased": true}

// exitCode maps a gRPC code to an exit status: refusals are 1, everything
// else that failed is 2.
func exitCode(c codes.Code) int {
	switch c {
	case codes.OK:
		return ExitOK
	case codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.ResourceExhausted:
		return ExitRefused
	default:
		return ExitFailed
	}
}
