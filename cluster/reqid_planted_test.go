//go:build plantedbugs

package cluster

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/fsm"
)

// When a waiting Acquire does meet a replayed refusal (here with the FSM's
// comparison planted back to resource only, as an entry restored from an
// older snapshot also compares), it returns it at once: a request id's
// first outcome is final, and proposing it again every millisecond would
// only spin. Run with: go test -tags plantedbugs -run Planted ./cluster/
func TestPlantedDedupResourceOnlyWaitingRetryDoesNotSpin(t *testing.T) {
	err, spent := waitingRetryOfARefusedRequestID(t, func(c *Config) {
		c.Testing.FSM.PlantedBugs = []string{fsm.BugDedupResourceOnly}
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("waiting retry meeting a replayed refusal: want it at once (FailedPrecondition), got %v", err)
	}
	if spent > 10 {
		t.Errorf("the waiting retry applied %d entries in its window", spent)
	}
}
