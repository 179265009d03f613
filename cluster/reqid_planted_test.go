//go:build plantedbugs

package cluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// When a waiting Acquire does meet a replayed refusal (here with the FSM's
// comparison planted back to resource only, as an entry restored from an
// older snapshot also compares), it returns it at once: a request id's
// first outcome is final, and proposing it again every millisecond would
// only spin. Run with: go test -tags plantedbugs -run Planted ./cluster/
func TestPlantedDedupResourceOnlyWaitingRetryDoesNotSpin(t *testing.T) {
	if unknown := fsm.PlantBugs([]string{fsm.BugDedupResourceOnly}); len(unknown) > 0 {
		t.Fatal(unknown)
	}
	t.Cleanup(fsm.ResetPlantedBugs) // after the cluster has stopped
	tc := newTestCluster(t, 3, nil)
	li, leader := tc.leader()
	c := tc.client(li)
	ctx := ctxT(t)
	hold, err := c.Acquire(ctx, acquireReq("x", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := acquireReq("x", 5*time.Second)
	req.RequestId = "polled"
	if _, err := c.Acquire(ctx, req); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("first attempt: %v", err)
	}
	if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: hold.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	req.Wait = true
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := leader.AppliedIndex()
	_, err = c.Acquire(wctx, req)
	spent := leader.AppliedIndex() - before
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("waiting retry meeting a replayed refusal: want it at once (FailedPrecondition), got %v", err)
	}
	if spent > 10 {
		t.Errorf("the waiting retry applied %d entries in its window", spent)
	}
}
