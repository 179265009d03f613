package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// delayReply holds the answer to method back for d after it arrived, as a
// slow network or a paused client would: the lease is granted on time, the
// client learns of it late.
func delayReply(method string, d time.Duration) grpc.UnaryClientInterceptor {
	return testcluster.DelayReply(d, func(m string) bool { return m == method })
}

// An Acquire whose answer arrives after the grant's safe window
// (sent_at + ttl_remaining×(1−drift) − margin) has closed must not hand out
// the dead lease: it fails with ErrSafeDeadline and releases the lease, so
// the resource is free at once rather than after the ttl. The waiting
// Acquire confirms its grant with one renewal; a late answer to that
// renewal is the same case.
func TestAcquireAnsweredAfterSafeWindowFailsAndReleases(t *testing.T) {
	const ttl = 2 * time.Second // the node's min ttl; window 1.75 s with the default margin
	for _, tc := range []struct {
		name, method string
		opts         []client.AcquireOption
	}{
		{"plain", "/leasefence.v1.LeaseService/Acquire", nil},
		{"wait", "/leasefence.v1.LeaseService/Renew", []client.AcquireOption{client.WithWait()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(client.Config{
				Endpoints:   []string{endpoint},
				DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(delayReply(tc.method, ttl))},
				// Long enough to hear the late answer: the default
				// per-attempt bound (1.2 s) would cut it and replay the
				// grant on time.
				RequestTimeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resource := "late/" + tc.name
			l, err := c.Acquire(ctx, resource, append(tc.opts, client.WithTTL(ttl))...)
			if err == nil || l != nil {
				t.Fatalf("acquire answered after its safe window: lease %v, err %v; want ErrSafeDeadline", l != nil, err)
			}
			if !errors.Is(err, client.ErrSafeDeadline) {
				t.Fatalf("err %v, want ErrSafeDeadline", err)
			}
			g, err := c.Get(ctx, resource)
			if err != nil {
				t.Fatal(err)
			}
			if g.Lease != nil {
				t.Fatalf("the late lease was not released: %+v", g.Lease)
			}
			if g.ScopeToken == 0 {
				t.Fatal("no lease was ever granted: the test did not exercise a late answer")
			}
		})
	}
}
