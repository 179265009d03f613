package client_test

import (
	"testing"
	"time"
)

// GetStale's answer says it is stale and which node answered; Get's does
// not claim to be stale.
func TestGetStaleSaysSoAndNamesTheNode(t *testing.T) {
	c, ctx := embeddedClient(t, 10*time.Second)
	l, err := c.Acquire(ctx, "stale/get")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	g, err := c.GetStale(ctx, "stale/get")
	if err != nil {
		t.Fatal(err)
	}
	if !g.Stale || g.Node == "" || g.Position.Index == 0 {
		t.Fatalf("stale get: %+v", g)
	}
	g, err = c.Get(ctx, "stale/get")
	if err != nil {
		t.Fatal(err)
	}
	if g.Stale || g.Node == "" || g.Lease == nil || g.Lease.Token != l.Token() {
		t.Fatalf("linearizable get: %+v", g)
	}
}
