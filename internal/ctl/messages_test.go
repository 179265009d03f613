package ctl

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/transport"
)

// Golden messages of issue 18: what was wrong, once, with the value given
// and the limit, without package prefixes or raw gRPC codes.
func TestInvalidArgumentSaysTheValueAndTheLimitOnce(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{})
	f.onAcquire = func(_ context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
		// What a node answers (cluster/service.go, fsm.FieldError).
		if r.GetScope() == "" {
			return nil, withDetail(t, codes.InvalidArgument, "fsm: invalid ttl: within [2s, 10m0s]",
				&api.BadField{Field: "ttl", Limit: "within [2s, 10m0s]"})
		}
		return nil, withDetail(t, codes.InvalidArgument, "fsm: invalid scope: must not contain control characters",
			&api.BadField{Field: "scope", Limit: "must not contain control characters"})
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "jobs/42", "--ttl", "1ms"}, "leasectl: invalid --ttl 1ms: must be within [2s, 10m0s]\n"},
		{[]string{"acquire", "jobs/42", "--ttl", "5s", "--scope", "a\tb"}, "leasectl: invalid --scope 'a\tb': must not contain control characters\n"},
	}
	for _, c := range cases {
		res := runCtl(t, append(c.args, "--endpoints", f.addr)...)
		if res.code != ExitFailed || res.stderr != c.want {
			t.Errorf("%q: exit %d, stderr %q, want %d and %q", c.args, res.code, res.stderr, ExitFailed, c.want)
		}
	}
}

func TestErrorsCarryNoPackagePrefixOrRawCode(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{
		onAcquire: func(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
			return nil, status.Error(codes.PermissionDenied, `cluster: permission denied: "billing" may not resource "jobs/1"`)
		},
		onRenew: func(context.Context, *api.RenewRequest) (*api.RenewResponse, error) {
			return nil, status.Error(codes.NotFound, "fsm: lease not found or expired")
		},
		onJoin: func(context.Context, *api.JoinRequest) (*api.JoinResponse, error) {
			return nil, status.Error(codes.ResourceExhausted, "cluster: limit reached: 7 members at most")
		},
		onSnapshot: func(_ *api.SnapshotRequest, s grpc.ServerStreamingServer[api.SnapshotChunk]) error {
			body := []byte("lease state")
			sum := sha256.Sum256(body)
			data := append(body, sum[:]...)
			return s.Send(&api.SnapshotChunk{Data: data, Index: 9, Size: uint64(len(data)), Sha256: hex.EncodeToString(sum[:])})
		},
	})
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"acquire", "jobs/1", "--ttl", "5s"}, `leasectl: permission denied: "billing" may not resource "jobs/1"` + "\n", ExitRefused},
		{[]string{"renew", testLeaseHex}, "leasectl: lease not found or expired\n", ExitRefused},
		{[]string{"members", "add", "n9", "h:1"}, "leasectl: limit reached: 7 members at most\n", ExitRefused},
		{[]string{"snapshot", "save", dir + "/no/such/dir/x"}, "leasectl: open " + dir + "/no/such/dir/x.part: no such file or directory\n", ExitFailed},
	}
	for _, c := range cases {
		res := runCtl(t, append(c.args, "--endpoints", f.addr)...)
		if res.code != c.code || res.stderr != c.want {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, res.code, res.stderr, c.code, c.want)
		}
	}
}

// A usage error prints the one command's usage and where to read more, not
// the whole help.
func TestUsageErrorPrintsTheCommandsUsageOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "leasectl: unknown command \"frobnicate\"\nrun \"leasectl help\" for the commands\n"},
		{[]string{}, "leasectl: no command given\nrun \"leasectl help\" for the commands\n"},
		{[]string{"members"}, "leasectl: members needs a subcommand: list, add or remove\nrun \"leasectl help members\" for its commands\n"},
		{[]string{"acquire", "jobs/42"}, "leasectl acquire: --ttl is required and must be positive\n" +
			"usage: leasectl acquire RESOURCE --ttl DURATION [--holder LABEL] [--request-id ID] [--scope SCOPE] [--wait]\n" +
			"run \"leasectl help acquire\" for its flags\n"},
		{[]string{"members", "add", "n4"}, "leasectl members add: members add takes 2 argument(s): ID ADDR\n" +
			"usage: leasectl members add ID ADDR [--nonvoter]\n" +
			"run \"leasectl help members add\" for its flags\n"},
	}
	for _, c := range cases {
		res := runCtl(t, c.args...)
		if res.code != ExitFailed || res.stderr != c.want || res.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant %d and:\n%s", c.args, res.code, res.stdout, res.stderr, ExitFailed, c.want)
		}
	}
}

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "6cf3111aa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		info *debug.BuildInfo
		json bool
		want string
	}{
		{info, false, "version v0.2.0\ncommit  6cf3111aa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5 (modified)\ngo      go1.26.8\n"},
		{info, true, `{"commit":"6cf3111aa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5","go":"go1.26.8","modified":true,"version":"v0.2.0"}` + "\n"},
		{nil, false, "version unknown\ncommit  unknown\ngo      " + runtime.Version() + "\n"},
	} {
		var stdout, stderr syncBuffer
		a := newTestApp(&stdout, &stderr)
		a.buildInfo = func() (*debug.BuildInfo, bool) { return c.info, c.info != nil }
		args := []string{"version"}
		if c.json {
			args = append(args, "--json")
		}
		if code := a.run(context.Background(), args); code != ExitOK || stdout.String() != c.want {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant:\n%s\nstderr %q", args, code, stdout.String(), c.want, stderr.String())
		}
	}
}

// release of an unknown or expired id is no error (release is idempotent):
// exit 0 with "released false", and the help and the README say so.
func TestReleaseOfUnknownIDExitCodeIsTheSameInHelpAndREADME(t *testing.T) {
	t.Parallel()
	const rule = `an unknown or expired id prints "released false" and exits 0`
	if res := runCtl(t, "help", "release"); !strings.Contains(res.stdout, rule) {
		t.Errorf("leasectl help release does not say %q:\n%s", rule, res.stdout)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "`release` of "+rule) {
		t.Errorf("README does not say \"`release` of %s\"", rule)
	}
}

// The old leader answers a transfer before it has heard from the new one,
// so its answer names no leader: transfer-leadership asks the cluster until
// a new leader is known, and prints it with its address.
func TestTransferLeadershipPrintsTheNewLeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	statuses := 0
	f := start(t, &fake{
		onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			statuses++
			s := testStatus("a:1", "b:1", "c:1") // n1 leads
			switch {
			case statuses == 2: // just after the transfer: no leader yet
				s.LeaderId, s.LeaderAddr = "", ""
			case statuses > 2:
				s.LeaderId, s.LeaderAddr = "n3", "c:1"
			}
			return s, nil
		},
		onTransfer: func(context.Context, *api.TransferLeadershipRequest) (*api.TransferLeadershipResponse, error) {
			return &api.TransferLeadershipResponse{}, nil
		},
	})
	res := runCtl(t, "transfer-leadership", "--endpoints", f.addr)
	if res.code != ExitOK || res.stdout != "leader now n3 (c:1)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want \"leader now n3 (c:1)\"", res.code, res.stdout, res.stderr)
	}
}

// An endpoint without a port used to dial :443 and fail later with a
// transport error; it is a usage error that says so, before any call.
func TestEndpointWithoutPortIsAUsageError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"status", "--endpoints", "localhost"}, "",
			"leasectl status: endpoint \"localhost\": missing port (want host:port, e.g. localhost:7001)\n"},
		{[]string{"status", "--endpoints", "127.0.0.1:7001,10.0.0.2:"}, "",
			"leasectl status: endpoint \"10.0.0.2:\": missing port (want host:port, e.g. 10.0.0.2:7001)\n"},
		{[]string{"status"}, "node-1:7001,node-2",
			"leasectl status: endpoint \"node-2\": missing port (want host:port, e.g. node-2:7001)\n"},
	}
	for _, c := range cases {
		var stdout, stderr syncBuffer
		a := newTestApp(&stdout, &stderr)
		a.getenv = func(k string) string {
			if k == EnvEndpoints {
				return c.env
			}
			return ""
		}
		code := a.run(context.Background(), c.args)
		if first := firstLine(stderr.String()) + "\n"; code != ExitFailed || first != c.want {
			t.Errorf("%q (env %q): exit %d, stderr:\n%s\nwant %d, first line %q", c.args, c.env, code, stderr.String(), ExitFailed, c.want)
		}
	}
}

// A plaintext leasectl against a node that speaks TLS used to end in
// "error reading server preface: EOF"; it says what to pass.
func TestPlaintextAgainstTLSNodeSaysToPassTLSFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := certgen.WriteCluster(dir, []string{"node"}, []string{"client"}, transport.DefaultPeerIdentity); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	f := startWith(t, &fake{onStatus: func(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
		return testStatus("a:1", "b:1", "c:1"), nil
	}}, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
	res := runCtl(t, "status", "--endpoints", f.addr, "--timeout", "2s")
	const hint = "leasectl: the node closed the connection before answering: it may speak TLS; pass --tls-ca FILE (with --tls-cert and --tls-key where it asks for a client certificate)\n"
	if res.code != ExitFailed || !strings.HasSuffix(res.stderr, hint) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d, ending in:\n%s", res.code, res.stderr, ExitFailed, hint)
	}
	if res := runCtl(t, "status", "--endpoints", f.addr, "--tls-ca", filepath.Join(dir, "ca.crt")); res.code != ExitOK {
		t.Errorf("with --tls-ca: exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestHelpStatesTheDefaultTimeout(t *testing.T) {
	t.Parallel()
	res := runCtl(t, "help")
	const want = "  --timeout duration     bound on the whole command, retries included (default 5s); 0 means none (acquire --wait, watch and snapshot save: none unless given)\n"
	if !strings.Contains(res.stdout, want) {
		t.Errorf("help lacks\n%s\nin:\n%s", want, res.stdout)
	}
}

// acquire --wait on a held resource says it is waiting, on whom, and how
// many wait ahead, before it waits.
func TestAcquireWaitSaysItIsWaiting(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{
		onGet: func(_ context.Context, r *api.GetRequest) (*api.GetResponse, error) {
			return &api.GetResponse{Lease: testLease(r.GetResource()), TtlRemaining: durationpb.New(4049 * time.Millisecond),
				ScopeToken: 7, Waiters: 2}, nil
		},
		onAcquire: granting,
	})
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--wait", "--endpoints", f.addr)
	const want = "leasectl: waiting for jobs/42: held by worker-a (token 7), time left 4s, 2 waiting ahead; Ctrl-C to stop\n"
	if res.code != ExitOK || res.stderr != want || !strings.Contains(res.stdout, "token     7\n") {
		t.Errorf("exit %d, stdout %q, stderr %q; want stderr %q", res.code, res.stdout, res.stderr, want)
	}
	if res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--endpoints", f.addr); res.stderr != "" {
		t.Errorf("without --wait: stderr %q", res.stderr)
	}
}

// members add of an address where nothing listens warns (a voter that never
// starts counts against the quorum), and adds it all the same.
func TestMembersAddWarnsWhenNothingAnswersAtTheAddress(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onJoin: func(context.Context, *api.JoinRequest) (*api.JoinResponse, error) {
		return &api.JoinResponse{}, nil
	}})
	dead := deadAddr(t)
	res := runCtl(t, "members", "add", "n4", dead, "--endpoints", f.addr)
	wantErr := "leasectl: warning: nothing answers at " + dead + ": until a node runs there, it counts against the quorum\n"
	if res.code != ExitOK || res.stdout != "added n4 ("+dead+") as voter\n" || res.stderr != wantErr {
		t.Errorf("exit %d, stdout %q, stderr %q; want stderr %q", res.code, res.stdout, res.stderr, wantErr)
	}
	res = runCtl(t, "members", "add", "n5", f.addr, "--endpoints", f.addr)
	if res.code != ExitOK || res.stderr != "" {
		t.Errorf("live address: exit %d, stderr %q", res.code, res.stderr)
	}
}

// A TLS node closing a plaintext connection shows as EOF or, when our
// bytes were still unread as it closed, as a reset (seen under load:
// the hint was missing); both get the TLS hint, other errors do not.
func TestClosedBeforePrefaceCoversEOFAndReset(t *testing.T) {
	for msg, want := range map[string]bool{
		`connection error: desc = "error reading server preface: EOF"`:                                                               true,
		`connection error: desc = "error reading server preface: connection reset by peer"`:                                          true,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`: true,
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:2: connect: connection refused"`:               false,
	} {
		if got := closedBeforePreface(msg); got != want {
			t.Errorf("closedBeforePreface(%q) = %v, want %v", msg, got, want)
		}
	}
}
