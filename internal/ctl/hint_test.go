package ctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// outcomeUnknown answers every Acquire as a node whose proposal's outcome
// it cannot know.
func outcomeUnknown(context.Context, *api.AcquireRequest) (*api.AcquireResponse, error) {
	return nil, status.Error(codes.Unavailable, "cluster: outcome unknown")
}

// retryHint returns the lines of stderr after the first: the note that
// tells how to learn the outcome.
func retryHint(stderr string) string {
	_, rest, _ := strings.Cut(stderr, "\n")
	return rest
}

func TestOutcomeUnknownHintReproducesTheWholeCommand(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onAcquire: outcomeUnknown})
	const note = "leasectl: retry with the same request id; it returns the first outcome, never a second lease:\n"

	// Every flag given, global ones included, quoted for the shell; the
	// token's value is not echoed: the hint takes it from the environment.
	res := runCtl(t, "--endpoints", f.addr, "--timeout", "30s", "acquire", "jobs/a b", "--ttl", "10s", "--scope", "dk",
		"--holder", "w'a", "--wait", "--token", "s3cret", "--request-id", "rid-1")
	want := note + "  leasectl --endpoints " + f.addr + ` --timeout 30s acquire 'jobs/a b' --ttl 10s --scope dk --holder 'w'\''a' --wait --token "$LEASEFENCE_TOKEN" --request-id rid-1` + "\n"
	if got := retryHint(res.stderr); res.code != ExitFailed || got != want {
		t.Errorf("exit %d, hint:\n%s\nwant:\n%s", res.code, got, want)
	}

	// Without --request-id the generated one is added, before a "--" so
	// that it stays a flag; --flag=value forms are kept as given.
	res = runCtl(t, "acquire", "--ttl=10s", "--scope=shard 7", "--json", "--token=s3cret", "--endpoints", f.addr, "--", "-odd")
	var out struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || out.RequestID == "" {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	want = note + "  leasectl acquire --ttl=10s '--scope=shard 7' --json --token=\"$LEASEFENCE_TOKEN\" --endpoints " + f.addr +
		" --request-id " + out.RequestID + " -- -odd\n"
	if got := res.stderr; res.code != ExitFailed || got != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", res.code, got, want)
	}
	for _, r := range acquireRequests(f) {
		if r.GetScope() == "shard 7" && r.GetResource() != "-odd" {
			t.Errorf("request %v: the resource after -- is -odd", r)
		}
	}
}
func TestShellQuote(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"jobs/42":           "jobs/42",
		"127.0.0.1:7001,x":  "127.0.0.1:7001,x",
		"--ttl=10s":         "--ttl=10s",
		"":                  "''",
		"a b":               "'a b'",
		"it's":              `'it'\''s'`,
		"$HOME":             `'$HOME'`,
		"a;rm -rf /":        `'a;rm -rf /'`,
		"`x`":               "'`x`'",
		"tab\there":         "'tab\there'",
		"worker-a@host_1+2": "worker-a@host_1+2",
	}
	for in, want := range cases {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// "cluster unreachable" only when no node answered; a node that answered it
// knows no leader makes it "no leader/quorum"; an acquire sent without an
// answer is "outcome unknown".
func TestFailureWordingSaysWhatTheNodesAnswered(t *testing.T) {
	t.Parallel()
	noLeader := start(t, &fake{})
	noLeader.onGet = func(context.Context, *api.GetRequest) (*api.GetResponse, error) {
		return nil, notLeader(t, "")
	}
	unknown := start(t, &fake{onAcquire: outcomeUnknown})
	dead := deadAddr(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no node answered", []string{"get", "jobs/42", "--endpoints", dead},
			"leasectl: cluster unreachable (tried " + dead + "): "},
		{"a node knows no leader", []string{"get", "jobs/42", "--endpoints", dead + "," + noLeader.addr},
			"leasectl: no leader/quorum: a node answered that it knows no leader (an election is under way, or most nodes are down or cut off); tried " + dead + ", " + noLeader.addr + "\n"},
		{"no answer to an acquire", []string{"acquire", "jobs/42", "--ttl", "10s", "--endpoints", unknown.addr},
			"leasectl: outcome unknown (tried " + unknown.addr + ")\n"},
	}
	for _, c := range cases {
		res := runCtl(t, c.args...)
		if line := firstLine(res.stderr) + "\n"; res.code != ExitFailed || !strings.HasPrefix(line, c.want) {
			t.Errorf("%s: exit %d, stderr:\n%s\nwant exit %d, first line %q", c.name, res.code, res.stderr, ExitFailed, c.want)
		}
	}

	// --json tells the classes apart by "reason".
	for args, want := range map[string]string{
		"get jobs/42 --endpoints " + dead:                       "unreachable",
		"get jobs/42 --endpoints " + dead + "," + noLeader.addr: "no_leader",
		"acquire jobs/42 --ttl 10s --endpoints " + unknown.addr: "outcome_unknown",
	} {
		res := runCtl(t, append(strings.Fields(args), "--json")...)
		var out struct{ Reason string }
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || out.Reason != want {
			t.Errorf("%s --json: stdout %q, want reason %q", args, res.stdout, want)
		}
	}
}
