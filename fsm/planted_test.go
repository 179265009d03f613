//go:build plantedbugs

package fsm

import (
	"testing"

	"pgregory.net/rapid"
)

// plantFor switches bug on for the rest of t (planted defects are
// process-wide: tests that plant one must not run in parallel).
func plantFor(t *testing.T, bug string) {
	t.Helper()
	if unknown := PlantBugs([]string{bug}); len(unknown) > 0 {
		t.Fatalf("unknown planted bug %v", unknown)
	}
	t.Cleanup(func() { delete(plantedOn, bug) })
}

// The restore property must catch issue 13's restore: with only the
// backup's scopes raised, some random disaster has a scope first used after
// the backup grant a token it had already granted before the loss.
func TestRestorePropertyCatchesRestoreBumpsKnownScopes(t *testing.T) {
	plantFor(t, BugRestoreBumpsKnownScopes)
	var (
		caught     string
		runs, hits int
	)
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		if v := checkRestoreBeatsLostTokens(rt); v != "" {
			hits++
			if caught == "" {
				caught = v
			}
		}
	})
	if caught == "" {
		t.Fatalf("planted %s: no violation in %d random disasters", BugRestoreBumpsKnownScopes, runs)
	}
	t.Logf("caught in %d of %d random disasters, first: %s", hits, runs, caught)
}
