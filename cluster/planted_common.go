package cluster

import (
	"crypto/sha256"
	"time"

	"github.com/leasefence/leasefence/fsm"
)

// Names of the node's planted defects. Only a build with the plantedbugs
// tag can switch them on (planted.go); see jepsen/README.md, "Planted bugs".
const (
	BugLocalReads         = "local-reads"
	BugWallClockTime      = "wall-clock-time"
	BugLeaseIDByResource  = "lease-id-by-resource"
	BugReleaseAckEarly    = "release-ack-before-commit"
	BugRenewAckEarly      = "renew-ack-before-commit"
	BugForwardNoTimeout   = "forward-no-timeout"
	BugAddUnprobed        = "add-unprobed"
	BugClusterIDUnchecked = "cluster-id-unchecked"
)

// wallNanos is the wall clock's reading: the fault clock's when c has one,
// else the system's. Only the planted wall-clock-time defect reads it.
func wallNanos(c Clock) int64 {
	if w, ok := c.(interface{ Wall() time.Time }); ok {
		return w.Wall().UnixNano()
	}
	return time.Now().UnixNano()
}

// resourceLeaseID is the planted lease-id-by-resource defect: the same id
// for every lease on a resource.
func resourceLeaseID(resource string) []byte {
	sum := sha256.Sum256([]byte(resource))
	return sum[:fsm.LeaseIDLen]
}

// renewAckLead is how far the planted renew-ack-before-commit answer runs
// ahead of its proposal: a leader killed or cut off within it loses
// renewals it acknowledged.
const renewAckLead = 200 * time.Millisecond
