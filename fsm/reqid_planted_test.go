//go:build plantedbugs

package fsm

import (
	"bytes"
	"testing"
)

// The planted dedup-resource-only defect is today's comparison before
// issue 13 (a request id's retry compared by resource only); the check of
// TestRequestIDOfAGrantWithAnyParameterChangedIsRefused must catch it: a
// retry with another scope, holder, ttl or wait replays the first lease.
// Run with: go test -tags plantedbugs -run Planted ./fsm/
func TestPlantedDedupResourceOnlyIsCaught(t *testing.T) {
	bug := planting(t, BugDedupResourceOnly)
	for _, refusedFirst := range []bool{false, true} {
		s := New(bug)
		if refusedFirst {
			apply(t, s, 1*sec, acquireCmd("r", 10*sec, 1, "holder"))
		}
		apply(t, s, 1*sec, acquireOf(reqAcquire(2)))
		got := changedParameterViolations(t, s, 1*sec)
		for _, name := range []string{"scope", "holder", "ttl", "wait"} {
			if got[name] == "" {
				t.Errorf("refused first %v: the check missed a replay across %s with the bug planted", refusedFirst, name)
			}
		}
		if got["resource"] != "" {
			t.Errorf("the bug compares the resource still: %s", got["resource"])
		}
		// Through a snapshot too.
		restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)), bug)
		if err != nil {
			t.Fatal(err)
		}
		if got := changedParameterViolations(t, restored, 1*sec); got["scope"] == "" {
			t.Errorf("refused first %v: missed after restore", refusedFirst)
		}
	}
}
