package ctl

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/leasefence/leasefence/api"
)

func TestTokenIsSentAsBearerOnEveryCall(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got []string
	)
	f := start(t, &fake{onAcquire: func(ctx context.Context, r *api.AcquireRequest) (*api.AcquireResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		got = md.Get("authorization")
		mu.Unlock()
		return granting(ctx, r)
	}})
	res := runCtl(t, "acquire", "jobs/42", "--ttl", "10s", "--token", "s3cret-token-0123", "--endpoints", f.addr)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "Bearer s3cret-token-0123" {
		t.Errorf("authorization metadata %q", got)
	}
	mu.Unlock()
	res = runCtl(t, "acquire", "jobs/43", "--ttl", "10s", "--endpoints", f.addr)
	mu.Lock()
	defer mu.Unlock()
	if res.code != ExitOK || len(got) != 0 {
		t.Errorf("without --token: exit %d, authorization %q: %s", res.code, got, res.stderr)
	}
}
