package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupLeased()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func acquireRequests(f *fake) []*api.AcquireRequest {
	var out []*api.AcquireRequest
	for _, m := range f.requests("Acquire") {
		out = append(out, m.(*api.AcquireRequest))
	}
	return out
}

func TestAcquireAcceptsFlagsBeforeAndAfterPositionals(t *testing.T) {
	t.Parallel()
	orders := map[string]func(ep string) []string{
		"flags after resource": func(ep string) []string {
			return []string{"acquire", "jobs/42", "--ttl", "10s", "--scope", "shard-7", "--holder", "worker-a", "--json", "--endpoints", ep}
		},
		"flags before command": func(ep string) []string {
			return []string{"--endpoints", ep, "--json", "acquire", "--ttl=10s", "-scope", "shard-7", "--holder", "worker-a", "jobs/42"}
		},
		"mixed": func(ep string) []string {
			return []string{"--json", "acquire", "--holder=worker-a", "jobs/42", "--endpoints=" + ep, "--scope", "shard-7", "--ttl", "10s"}
		},
	}
	for name, args := range orders {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := start(t, &fake{onAcquire: granting})
			res := runCtl(t, args(f.addr)...)
			if res.code != ExitOK {
				t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
			}
			reqs := acquireRequests(f)
			if len(reqs) != 1 {
				t.Fatalf("got %d acquires, want 1", len(reqs))
			}
			r := reqs[0]
			if r.GetResource() != "jobs/42" || r.GetScope() != "shard-7" || r.GetHolder() != "worker-a" ||
				r.GetTtl().AsDuration() != 10*time.Second || r.GetWait() {
				t.Errorf("request = %v", r)
			}
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.GetRequestId()) {
				t.Errorf("request id %q is not 32 lowercase hex characters", r.GetRequestId())
			}
			var out struct {
				Lease struct {
					ID       string `json:"id"`
					Resource string `json:"resource"`
					Scope    string `json:"scope"`
					Token    uint64 `json:"token"`
					Holder   string `json:"holder"`
					TTL      string `json:"ttl"`
				} `json:"lease"`
				TimeLeft  string `json:"time_left"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
				t.Fatalf("stdout %q is not JSON: %v", res.stdout, err)
			}
			if out.Lease.ID != testLeaseB64 || out.Lease.Resource != "jobs/42" || out.Lease.Scope != "shard-7" ||
				out.Lease.Token != 7 || out.Lease.TTL != "10s" || out.TimeLeft != "9.8s" || out.RequestID != r.GetRequestId() {
				t.Errorf("JSON = %+v", out)
			}
		})
	}
}

func TestAcquireHumanOutput(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onAcquire: granting})
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--holder", "worker-a", "--endpoints", f.addr)
	want := "lease     " + testLeaseB64 + "\n" +
		"resource  jobs/42\n" +
		"scope     jobs/42\n" +
		"token     7\n" +
		"holder    worker-a\n" +
		"ttl       10s\n" +
		"time left 9.8s\n"
	if res.code != ExitOK || res.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", res.code, res.stdout, want, res.stderr)
	}
}

func TestAcquireDefaultsHolderToHostName(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onAcquire: granting})
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--endpoints", f.addr)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if got := acquireRequests(f)[0].GetHolder(); got != "leasectl@testhost" {
		t.Errorf("holder = %q", got)
	}
}

func TestAcquireFailsOverToNextEndpointWithTheSameRequestID(t *testing.T) {
	t.Parallel()
	for _, given := range []string{"", "my-request-1"} {
		t.Run("request-id="+given, func(t *testing.T) {
			t.Parallel()
			down := deadAddr(t)
			flaky := start(t, &fake{onAcquire: func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
				return nil, status.Error(codes.Unavailable, "no quorum")
			}})
			good := start(t, &fake{onAcquire: granting})
			args := []string{"acquire", "jobs/42", "--ttl", "10s", "--endpoints", down + "," + flaky.addr + "," + good.addr}
			if given != "" {
				args = append(args, "--request-id", given)
			}
			res := runCtl(t, args...)
			if res.code != ExitOK {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			a, b := acquireRequests(flaky), acquireRequests(good)
			if len(a) != 1 || len(b) != 1 {
				t.Fatalf("acquires: flaky %d, good %d; want 1 each", len(a), len(b))
			}
			if a[0].GetRequestId() != b[0].GetRequestId() {
				t.Errorf("request ids differ across endpoints: %q then %q", a[0].GetRequestId(), b[0].GetRequestId())
			}
			if given != "" && b[0].GetRequestId() != given {
				t.Errorf("request id = %q, want %q", b[0].GetRequestId(), given)
			}
		})
	}
}

func TestNotLeaderSendsTheNextAttemptToTheLeader(t *testing.T) {
	t.Parallel()
	leader := start(t, &fake{onAcquire: granting})
	follower := start(t, &fake{})
	follower.onAcquire = func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
		return nil, notLeader(t, leader.addr)
	}
	bystander := start(t, &fake{onAcquire: granting})
	// The leader is not even among the endpoints: the hint alone leads there,
	// ahead of the next configured endpoint.
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--endpoints", follower.addr+","+bystander.addr)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if n := bystander.callCount(); n != 0 {
		t.Errorf("bystander got %d calls, want 0", n)
	}
	f, l := acquireRequests(follower), acquireRequests(leader)
	if len(f) != 1 || len(l) != 1 || f[0].GetRequestId() != l[0].GetRequestId() {
		t.Errorf("follower %v, leader %v: want one acquire each with one request id", f, l)
	}
}

func TestUnreachableClusterExitsTwoAfterTryingEveryEndpoint(t *testing.T) {
	t.Parallel()
	a, b := deadAddr(t), deadAddr(t)
	res := runCtl(t, "status", "--endpoints", a+","+b, "--json")
	if res.code != ExitFailed {
		t.Fatalf("exit %d, want %d", res.code, ExitFailed)
	}
	var out struct {
		Error string   `json:"error"`
		Code  string   `json:"code"`
		Tried []string `json:"tried"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	if out.Code != "Unavailable" || len(out.Tried) != 2 || out.Tried[0] != a || out.Tried[1] != b {
		t.Errorf("error JSON = %+v", out)
	}
}

func TestExitStatusByErrorClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code codes.Code
		want int
	}{
		{codes.FailedPrecondition, ExitRefused},
		{codes.NotFound, ExitRefused},
		{codes.AlreadyExists, ExitRefused},
		{codes.PermissionDenied, ExitRefused},
		{codes.ResourceExhausted, ExitRefused},
		{codes.InvalidArgument, ExitFailed},
		{codes.DeadlineExceeded, ExitFailed},
		{codes.Internal, ExitFailed},
		{codes.Unavailable, ExitFailed},
	}
	for _, c := range cases {
		t.Run(c.code.String(), func(t *testing.T) {
			t.Parallel()
			f := start(t, &fake{onRenew: func(context.Context, *api.RenewRequest) (*api.RenewResponse, error) {
				return nil, status.Error(c.code, "nope")
			}})
			res := runCtl(t, "renew", testLeaseHex, "--endpoints", f.addr)
			if res.code != c.want {
				t.Errorf("exit %d, want %d (stderr %q)", res.code, c.want, res.stderr)
			}
			if !strings.Contains(res.stderr, "nope") {
				t.Errorf("stderr %q does not carry the message", res.stderr)
			}
		})
	}
}

func TestCommandTimeoutExitsTwo(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onGet: func(ctx context.Context, _ *api.GetRequest) (*api.GetResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	res := runCtl(t, "get", "jobs/42", "--timeout", "100ms", "--endpoints", f.addr, "--json")
	var out struct{ Code string }
	json.Unmarshal([]byte(res.stdout), &out)
	if res.code != ExitFailed || out.Code != "DeadlineExceeded" {
		t.Errorf("exit %d, stdout %q", res.code, res.stdout)
	}
}

func TestHeldResourceIsARefusalWithHolderAndTimeLeft(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{})
	f.onAcquire = func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
		return nil, withDetail(t, codes.FailedPrecondition, "resource held", &api.ResourceHeld{
			Resource: "jobs/42", Holder: "worker-a", Token: 7, TimeLeft: durationpb.New(8123 * time.Millisecond),
		})
	}
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--endpoints", f.addr)
	if res.code != ExitRefused || res.stderr != "held by worker-a (token 7), free in 8.1s\n" || res.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	res = runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--endpoints", f.addr, "--json", "--request-id", "r1")
	var out map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	want := map[string]any{"error": "resource held", "code": "FailedPrecondition", "resource": "jobs/42",
		"holder": "worker-a", "token": 7.0, "time_left": "8.1s", "request_id": "r1"}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("JSON %s = %v, want %v", k, out[k], v)
		}
	}
	if res.code != ExitRefused {
		t.Errorf("exit %d", res.code)
	}
}

func TestInvalidArgumentShowsTheField(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{})
	f.onAcquire = func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
		return nil, withDetail(t, codes.InvalidArgument, "ttl too short", &api.BadField{Field: "ttl", Limit: ">= 2s"})
	}
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "1s", "--endpoints", f.addr)
	if res.code != ExitFailed || !strings.Contains(res.stderr, "invalid --ttl 1s: must be >= 2s") {
		t.Errorf("exit %d, stderr %q", res.code, res.stderr)
	}
	if strings.Contains(res.stderr, "outcome is unknown") {
		t.Errorf("a rejected acquire is not indeterminate: %q", res.stderr)
	}
}

func TestAcquireWaitHasNoDeadlineUnlessGivenAndInterruptCancels(t *testing.T) {
	t.Parallel()
	type seen struct {
		hasDeadline bool
	}
	calls := make(chan seen, 4)
	f := start(t, &fake{onAcquire: func(ctx context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
		_, ok := ctx.Deadline()
		calls <- seen{hasDeadline: ok}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}})

	// --wait without --timeout: no deadline; an interrupt ends it with 130
	// and prints the request id for a safe retry.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		done <- runCtlCtx(ctx, "acquire", "jobs/42", "--ttl", "10s", "--wait", "--request-id", "rid-1", "--endpoints", f.addr)
	}()
	if s := <-calls; s.hasDeadline {
		t.Error("acquire --wait without --timeout sent a deadline")
	}
	if r := acquireRequests(f); len(r) != 1 || !r[0].GetWait() {
		t.Errorf("requests = %v, want one with wait", r)
	}
	cancel()
	res := <-done
	if res.code != ExitInterrupted || !strings.Contains(res.stderr, "--request-id rid-1") {
		t.Errorf("exit %d, stderr %q", res.code, res.stderr)
	}

	// An explicit --timeout bounds the wait; running out of it is no
	// failure of the cluster: it says so and exits 1. (The fake cannot
	// say who holds the resource: the outcome stays unknown.)
	res = runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--wait", "--timeout", "200ms", "--endpoints", f.addr)
	if s := <-calls; !s.hasDeadline {
		t.Error("acquire --wait --timeout sent no deadline")
	}
	if res.code != ExitRefused || !strings.HasPrefix(res.stderr, "leasectl: timed out waiting for jobs/42 after 200ms\n") ||
		!strings.Contains(res.stderr, "--request-id ") {
		t.Errorf("exit %d, want %d; stderr %q", res.code, ExitRefused, res.stderr)
	}
}

func TestLeaseIDIsBase64OrLegacyHex(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{
		onRenew: func(context.Context, *api.RenewRequest) (*api.RenewResponse, error) {
			return &api.RenewResponse{Lease: testLease("jobs/42"), TtlRemaining: durationpb.New(10 * time.Second)}, nil
		},
		onRelease: func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) {
			return &api.ReleaseResponse{Released: true, Lease: testLease("jobs/42")}, nil
		},
	})
	bad := []string{"", "3f2a", testLeaseHex + "0", testLeaseHex[:31], strings.ToUpper(testLeaseHex),
		"zz2a0102030405060708090a0b0c0dee", "0x2a0102030405060708090a0b0c0dee", "-" + testLeaseHex[1:]}
	for _, cmd := range []string{"renew", "release"} {
		for _, id := range bad {
			res := runCtl(t, cmd, "--endpoints", f.addr, "--", id)
			if res.code != ExitFailed || !strings.Contains(res.stderr, "want the 24-character base64 id") {
				t.Errorf("%s %q: exit %d, stderr %q", cmd, id, res.code, res.stderr)
			}
		}
	}
	if n := f.callCount(); n != 0 {
		t.Fatalf("bad ids reached the service %d times", n)
	}
	// The base64 form leasectl and grpcurl print, unpadded or URL-safe as
	// protobuf JSON accepts it, and the hex of older releases.
	forms := []string{testLeaseB64, strings.TrimRight(testLeaseB64, "="), testLeaseHex}
	for _, cmd := range []string{"renew", "release"} {
		for _, id := range forms {
			if res := runCtl(t, cmd, id, "--endpoints", f.addr); res.code != ExitOK {
				t.Errorf("%s %s: exit %d: %s", cmd, id, res.code, res.stderr)
			}
		}
	}
	for _, m := range []string{"Renew", "Release"} {
		for i, r := range f.requests(m) {
			if got := r.(interface{ GetLeaseId() []byte }).GetLeaseId(); string(got) != string(testLeaseID) {
				t.Errorf("%s with %s sent id %x", m, forms[i], got)
			}
		}
	}
}

func TestRenewPrintsTheLease(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onRenew: func(context.Context, *api.RenewRequest) (*api.RenewResponse, error) {
		return &api.RenewResponse{Lease: testLease("jobs/42"), TtlRemaining: durationpb.New(9960 * time.Millisecond)}, nil
	}})
	res := runCtl(t, "renew", testLeaseHex, "--endpoints", f.addr)
	if res.code != ExitOK || !strings.Contains(res.stdout, "token     7\n") || !strings.HasSuffix(res.stdout, "time left 10s\n") {
		t.Errorf("exit %d, stdout:\n%s", res.code, res.stdout)
	}
}

func TestReleaseOfUnknownIDPrintsReleasedFalseAndSucceeds(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onRelease: func(context.Context, *api.ReleaseRequest) (*api.ReleaseResponse, error) {
		return &api.ReleaseResponse{Released: false}, nil
	}})
	res := runCtl(t, "release", testLeaseHex, "--endpoints", f.addr)
	if res.code != ExitOK || res.stdout != "released false\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res = runCtl(t, "release", testLeaseHex, "--endpoints", f.addr, "--json")
	if res.code != ExitOK || strings.TrimSpace(res.stdout) != `{"released":false,"lease":null}` {
		t.Errorf("exit %d, stdout %q", res.code, res.stdout)
	}
}

func TestGetOutput(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onGet: func(_ context.Context, r *api.GetRequest) (*api.GetResponse, error) {
		if r.GetResource() == "free/1" {
			return &api.GetResponse{ScopeToken: 3, AppliedIndex: 120, Stale: r.GetStale(), NodeId: "n2"}, nil
		}
		return &api.GetResponse{Lease: testLease(r.GetResource()), TtlRemaining: durationpb.New(4049 * time.Millisecond),
			ScopeToken: 7, AppliedIndex: 121}, nil
	}})

	res := runCtl(t, "get", "jobs/42", "--endpoints", f.addr)
	want := "state       held\n" +
		"lease       " + testLeaseB64 + "\n" +
		"resource    jobs/42\n" +
		"scope       jobs/42\n" +
		"token       7\n" +
		"holder      worker-a\n" +
		"ttl         10s\n" +
		"time left   4s\n" +
		"scope token 7\n" +
		"applied     121\n"
	if res.code != ExitOK || res.stdout != want {
		t.Errorf("held: exit %d, stdout:\n%s\nwant:\n%s", res.code, res.stdout, want)
	}

	res = runCtl(t, "get", "free/1", "--stale", "--endpoints", f.addr)
	want = "resource    free/1\n" +
		"state       free\n" +
		"scope token 3\n" +
		"applied     120\n" +
		"stale       yes: n2's local state at index 120, may lag the leader\n"
	if res.code != ExitOK || res.stdout != want {
		t.Errorf("free: exit %d, stdout:\n%s\nwant:\n%s", res.code, res.stdout, want)
	}
	reqs := f.requests("Get")
	if !reqs[1].(*api.GetRequest).GetStale() || reqs[0].(*api.GetRequest).GetStale() {
		t.Errorf("stale flags sent: %v", reqs)
	}

	res = runCtl(t, "get", "jobs/42", "--json", "--endpoints", f.addr)
	var out getResult
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	if !out.Held || out.Lease == nil || out.Lease.ID != testLeaseB64 || out.TimeLeft != "4s" || out.ScopeToken != 7 {
		t.Errorf("JSON = %+v", out)
	}
}

func testStatus(addrs ...string) *api.StatusResponse {
	return &api.StatusResponse{
		Id: "n2", Addr: addrs[1], State: "follower", LeaderId: "n1", LeaderAddr: addrs[0],
		Term: 3, CommitIndex: 120, AppliedIndex: 119, LastLogIndex: 121,
		Members: []*api.Member{
			{Id: "n1", Addr: addrs[0], Suffrage: "voter", Leader: true},
			{Id: "n2", Addr: addrs[1], Suffrage: "voter"},
			{Id: "n3", Addr: addrs[2], Suffrage: "nonvoter"},
		},
		LiveLeases: 4, ClusterTimeNs: 123456789, SkewMarginNs: int64(500 * time.Millisecond),
		Drift: 1e-4, TickNs: int64(time.Second), Version: "0.1.0", Served: []string{"n1", "n2"},
	}
}

func TestStatusOutput(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
		return testStatus("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"), nil
	}})
	res := runCtl(t, "status", "--endpoints", f.addr)
	want := "node           n2 (10.0.0.2:7001) follower\n" +
		"view           n2's own, as a follower: it may lag the leader's\n" +
		"leader         n1 (10.0.0.1:7001)\n" +
		"term           3\n" +
		"commit index   120\n" +
		"applied index  119\n" +
		"last log index 121\n" +
		"live leases    4\n" +
		"served         n1, n2\n" +
		"skew margin    500ms\n" +
		"drift          0.0001\n" +
		"tick           1s\n" +
		"version        0.1.0\n" +
		"members\n" +
		"  ID  ADDRESS        SUFFRAGE\n" +
		"  n1  10.0.0.1:7001  voter     leader\n" +
		"  n2  10.0.0.2:7001  voter\n" +
		"  n3  10.0.0.3:7001  nonvoter\n"
	if res.code != ExitOK || res.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", res.code, res.stdout, want)
	}

	res = runCtl(t, "status", "--json", "--endpoints", f.addr)
	var out statusResult
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	if out.AnsweredBy != f.addr || out.LeaderID != "n1" || out.SkewMargin != "500ms" || out.Tick != "1s" ||
		out.Drift != 1e-4 || len(out.Members) != 3 || !out.Members[0].Leader || out.Members[2].Suffrage != "nonvoter" ||
		len(out.Served) != 2 {
		t.Errorf("JSON = %+v", out)
	}
}

// A founder holding its votes says so, in text and JSON.
func TestStatusShowsHeldVotes(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
		st := testStatus("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001")
		st.VotesHeld = true
		return st, nil
	}})
	res := runCtl(t, "status", "--endpoints", f.addr)
	if want := "votes held     until its founders answer whether it served in this cluster before\n"; res.code != ExitOK || !strings.Contains(res.stdout, want) {
		t.Errorf("exit %d, stdout:\n%s\nwant a line %q", res.code, res.stdout, want)
	}
	res = runCtl(t, "status", "--json", "--endpoints", f.addr)
	var out statusResult
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || !out.VotesHeld {
		t.Errorf("JSON %s: %+v, %v", res.stdout, out, err)
	}
}

func TestMembershipCommandsWrapClusterService(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{
		onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
			return testStatus("a:1", "b:1", "c:1"), nil
		},
		onJoin: func(context.Context, *api.JoinRequest) (*api.JoinResponse, error) { return &api.JoinResponse{}, nil },
		onRemove: func(context.Context, *api.RemoveRequest) (*api.RemoveResponse, error) {
			return &api.RemoveResponse{}, nil
		},
		onTransfer: func(_ context.Context, r *api.TransferLeadershipRequest) (*api.TransferLeadershipResponse, error) {
			id := r.GetId()
			if id == "" {
				id = "n3"
			}
			return &api.TransferLeadershipResponse{LeaderId: id}, nil
		},
	})
	cases := []struct {
		args   []string
		stdout string
		method string
		req    proto.Message
	}{
		{[]string{"members", "list"}, "ID  ADDRESS  SUFFRAGE\nn1  a:1      voter     leader\nn2  b:1      voter\nn3  c:1      nonvoter\n",
			"Status", &api.StatusRequest{}},
		{[]string{"members", "add", "n4", "d:1", "--nonvoter"}, "added n4 (d:1) as nonvoter\n",
			"Join", &api.JoinRequest{Id: "n4", Addr: "d:1", Nonvoter: true}},
		{[]string{"--nonvoter", "members", "add", "n5", "e:1"}, "added n5 (e:1) as nonvoter\n",
			"Join", &api.JoinRequest{Id: "n5", Addr: "e:1", Nonvoter: true}},
		{[]string{"members", "add", "n6", "f:1"}, "added n6 (f:1) as voter\n",
			"Join", &api.JoinRequest{Id: "n6", Addr: "f:1"}},
		{[]string{"members", "remove", "n4"}, "removed n4\n", "Remove", &api.RemoveRequest{Id: "n4"}},
		{[]string{"transfer-leadership", "n2"}, "leader now n2 (b:1)\n",
			"TransferLeadership", &api.TransferLeadershipRequest{Id: "n2"}},
		{[]string{"transfer-leadership"}, "leader now n3 (c:1)\n",
			"TransferLeadership", &api.TransferLeadershipRequest{}},
	}
	for _, c := range cases {
		before := len(f.requests(c.method))
		res := runCtl(t, append(c.args, "--endpoints", f.addr)...)
		if res.code != ExitOK || res.stdout != c.stdout {
			t.Errorf("%v: exit %d, stdout %q, want %q (stderr %q)", c.args, res.code, res.stdout, c.stdout, res.stderr)
			continue
		}
		reqs := f.requests(c.method)
		if len(reqs) != before+1 || !proto.Equal(reqs[before], c.req) {
			t.Errorf("%v: requests %v, want last %v", c.args, reqs, c.req)
		}
	}
	res := runCtl(t, "members", "list", "--json", "--endpoints", f.addr)
	var out struct{ Members []memberView }
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || len(out.Members) != 3 {
		t.Errorf("members list --json: %q (%v)", res.stdout, err)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onAcquire: granting})
	cases := [][]string{
		{},
		{"frobnicate"},
		{"members"},
		{"members", "frob"},
		{"acquire", "jobs/42"},                 // no --ttl
		{"acquire", "jobs/42", "--ttl", "-1s"}, // negative ttl
		{"acquire", "jobs/42", "--ttl", "ten"}, // bad duration
		{"acquire", "a", "b", "--ttl", "10s"},  // two resources
		{"acquire", "jobs/42", "--ttl", "10s", "-x"}, // unknown flag
		{"get"},
		{"status", "extra"},
		{"watch", "jobs/", "--after", "12"},
		{"watch", "jobs/", "--after", "x.1"},
		{"members", "add", "n4"},
		{"get", "jobs/42", "--endpoints", " , "},
	}
	for _, args := range cases {
		if !slices.Contains(args, "--endpoints") {
			args = append(args, "--endpoints", f.addr)
		}
		res := runCtl(t, args...)
		if res.code != ExitFailed || res.stderr == "" {
			t.Errorf("%q: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}
	if n := f.callCount(); n != 0 {
		t.Errorf("usage errors reached the service %d times", n)
	}
	res := runCtl(t, "renew", "nothex", "--json")
	var out struct{ Code, Error string }
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || out.Code != "Usage" || res.code != ExitFailed {
		t.Errorf("renew nothex --json: exit %d, stdout %q", res.code, res.stdout)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "acquire"}, {"acquire", "-h"},
		{"members", "add", "--help"}, {"help", "members"}, {"help", "snapshot"}} {
		res := runCtl(t, args...)
		if res.code != ExitOK || !strings.Contains(res.stdout, "usage: leasectl") {
			t.Errorf("%q: exit %d, stdout %q", args, res.code, res.stdout)
		}
	}
	res := runCtl(t, "help")
	for _, c := range commands {
		if !strings.Contains(res.stdout, "  "+c.name) {
			t.Errorf("help does not list %q", c.name)
		}
	}
	if res := runCtl(t, "acquire", "--help"); !strings.Contains(res.stdout, "--ttl DURATION") {
		t.Errorf("acquire --help: %q", res.stdout)
	}
	var stdout, stderr syncBuffer
	if code := Run(context.Background(), []string{"help", "watch"}, strings.NewReader(""), &stdout, &stderr); code != ExitOK ||
		!strings.Contains(stdout.String(), "usage: leasectl watch RESOURCE_OR_PREFIX") {
		t.Errorf("Run help watch: exit %d, stdout %q", code, stdout.String())
	}
}

func TestEndpointsDefaultFromEnvironment(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
		return testStatus("a:1", "b:1", "c:1"), nil
	}})
	var stdout, stderr syncBuffer
	a := newTestApp(&stdout, &stderr)
	a.getenv = func(k string) string {
		if k == EnvEndpoints {
			return deadAddr(t) + ", " + f.addr
		}
		return ""
	}
	if code := a.run(context.Background(), []string{"status"}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if f.callCount() != 1 {
		t.Errorf("status from $%s did not reach %s", EnvEndpoints, f.addr)
	}
}

func TestRoundDuration(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{
		-time.Second:                          "0s",
		0:                                     "0s",
		849400 * time.Microsecond:             "849ms",
		9849 * time.Millisecond:               "9.8s",
		9851 * time.Millisecond:               "9.9s",
		10 * time.Second:                      "10s",
		90*time.Second + 400*time.Millisecond: "1m30s",
	}
	for d, want := range cases {
		if got := roundDuration(d); got != want {
			t.Errorf("roundDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestReorderKeepsValuesWithTheirFlags(t *testing.T) {
	t.Parallel()
	cmd := lookupCommand("acquire")
	a := newApp(nil, nil, nil)
	a.getenv = func(string) string { return "" }
	fs := a.flagSetFor(cmd)
	a.globalFlags(fs)
	got := reorder(fs, []string{"jobs/42", "--ttl", "10s", "--wait", "x", "--json=true", "--", "--odd"})
	want := []string{"--ttl", "10s", "--wait", "--json=true", "--", "jobs/42", "x", "--odd"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("reorder = %q, want %q", got, want)
	}
}

func TestStatusShowsACorruptState(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
		st := testStatus("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001")
		st.StateCorrupt = "at index 4096 this node's state hash is 0a, voters n1,n3 agree on 0b"
		return st, nil
	}})
	res := runCtl(t, "status", "--endpoints", f.addr)
	if !strings.Contains(res.stdout, "STATE CORRUPT  at index 4096 this node's state hash is 0a, voters n1,n3 agree on 0b; replace this node\n") {
		t.Errorf("stdout:\n%s", res.stdout)
	}
	res = runCtl(t, "status", "--json", "--endpoints", f.addr)
	var out statusResult
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || !strings.HasPrefix(out.StateCorrupt, "at index 4096") {
		t.Errorf("JSON %q: %v", res.stdout, err)
	}
}
