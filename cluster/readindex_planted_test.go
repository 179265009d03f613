//go:build plantedbugs

package cluster

import (
	"testing"
	"time"
)

// The planted read-raft-applied waits for raft's applied index, as reads
// did before: held at the leader's apply of a committed grant, its read
// answers from state without the grant, which
// TestAReadWaitsForTheStateMachineNotRaftsAppliedIndex refuses.
func TestPlantedReadRaftAppliedAnswersWithoutTheHeldEntry(t *testing.T) {
	early, idx := readWhileApplyHeld(t, func(c *Config) {
		c.Testing = TestingKnobs{PlantedBugs: []string{BugReadRaftApplied}}
	}, 10*time.Second) // it answers at once; the window only spares a loaded machine
	if early == nil {
		t.Fatalf("the planted read waited for entry %d: it no longer takes raft's applied index", idx)
	}
	if early.Lease != nil || early.AppliedIndex >= idx {
		t.Fatalf("the planted read answered at index %d (lease %v), entry %d held: it should have missed it", early.AppliedIndex, early.Lease, idx)
	}
}
