package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
)

// A request id names one request: reusing it with another scope is an
// invalid argument naming request_id, never the first lease.
func TestRequestIDReusedWithAnotherScopeIsInvalid(t *testing.T) {
	c, ctx := embeddedClient(t, 20*time.Second)
	l, err := c.Acquire(ctx, "reqid/c1", client.WithRequestID("req-scope-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = c.Acquire(ctx, "reqid/c1", client.WithRequestID("req-scope-1"), client.WithScope("dk"))
	var ie *client.InvalidError
	if !errors.As(err, &ie) || !errors.Is(err, client.ErrInvalidArgument) || ie.Field != "request_id" {
		t.Fatalf("request id reused with another scope: %v", err)
	}
}
