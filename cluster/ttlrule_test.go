package cluster

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// The ttl rule is one rule (fsm.ValidateTTL) at every entry: a ttl a node's
// gRPC entry accepts is granted, one it refuses is InvalidArgument, and
// either way the answer agrees with fsm.ValidateTTL under the node's
// bounds; whatever the entry accepts, every replica's apply check
// (fsm.ValidateAcquire, skew margin only) accepts too.
func TestTTLRuleIsTheSameAtEveryEntry(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	cfg := tc.nodes[0].Config()
	bounds := fsm.TTLBounds{Min: cfg.MinTTL, Max: cfg.MaxTTL, SkewMargin: cfg.SkewMargin}
	c := tc.client(0)
	for i, ttl := range []time.Duration{
		-time.Second, 0, 1, cfg.SkewMargin, 2 * cfg.SkewMargin, 2*cfg.SkewMargin + 1,
		cfg.MinTTL - 1, cfg.MinTTL, cfg.MinTTL + time.Second, cfg.MaxTTL, cfg.MaxTTL + 1,
	} {
		t.Run(ttl.String(), func(t *testing.T) {
			rule := fsm.ValidateTTL(ttl, bounds)
			resource := fmt.Sprintf("ttl-%d", i)
			_, err := c.Acquire(ctxT(t), &api.AcquireRequest{Resource: resource, Holder: "h", Ttl: durationpb.New(ttl)})
			switch {
			case rule == nil && err != nil:
				t.Fatalf("the rule accepts %v, the node refused: %v", ttl, err)
			case rule != nil && status.Code(err) != codes.InvalidArgument:
				t.Fatalf("the rule refuses %v (%v), the node answered %v", ttl, rule, err)
			}
			apply := fsm.ValidateAcquire(&fsmpb.Acquire{Resource: resource, TtlNs: int64(ttl), LeaseId: make([]byte, fsm.LeaseIDLen)}, int64(cfg.SkewMargin))
			if rule == nil && apply != nil {
				t.Fatalf("the entry accepts %v, a replica's apply would refuse it: %v", ttl, apply)
			}
		})
	}
}
