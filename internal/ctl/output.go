package ctl

import (
	"context"
	"encoding/hex"
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
		ID:          hex.EncodeToString(l.GetId()),
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
	StateCorrupt  string       `json:"state_corrupt,omitempty"`
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
	k.row("lease", hex.EncodeToString(l.GetId()))
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
// stderr.
func (a *app) report(ctx context.Context, err error) int {
	var extra map[string]any
	note := ""
	var ae *annotatedError
	if errors.As(err, &ae) {
		extra, note, err = ae.fields, ae.note, ae.err
	}
	st := status.Convert(err)
	code := exitCode(st.Code())
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		code = ExitInterrupted
	}
	if a.json {
		obj := map[string]any{"error": st.Message(), "code": st.Code().String()}
		for k, v := range extra {
			obj[k] = v
		}
		var ue *unreachableError
		if errors.As(err, &ue) {
			obj["tried"] = ue.tried
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
		if note != "" {
			fmt.Fprintln(a.stderr, note)
		}
		return code
	}
	fmt.Fprintln(a.stderr, humanError(st))
	if note != "" {
		fmt.Fprintln(a.stderr, note)
	}
	return code
}

// humanError is the one-line message for a failed call.
func humanError(st *status.Status) string {
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *api.ResourceHeld:
			return fmt.Sprintf("held by %s (token %d), free in %s",
				d.GetHolder(), d.GetToken(), roundDuration(asDuration(d.GetTimeLeft())))
		case *api.BadField:
			msg := fmt.Sprintf("leasectl: invalid %s: %s", d.GetField(), st.Message())
			if d.GetLimit() != "" {
				msg += " (limit " + d.GetLimit() + ")"
			}
			return msg
		}
	}
	return fmt.Sprintf("leasectl: %s (%s)", st.Message(), st.Code())
}

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
