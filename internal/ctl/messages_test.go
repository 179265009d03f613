package ctl

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasefence/leasefence/api"
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
