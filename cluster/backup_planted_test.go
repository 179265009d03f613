//go:build plantedbugs

package cluster

import "testing"

// The planted restore-ignores-epoch restores as before epochs: the second
// restore of one backup starts from the first's floor and reissues its
// tokens.
func TestPlantedRestoreIgnoresEpochReissuesTokens(t *testing.T) {
	issued, got, _, _ := restoreOneBackupTwice(t, func(c *Config) { c.Testing.PlantedBugs = []string{BugRestoreIgnoresEpoch} })
	if got > issued {
		t.Fatalf("planted %s: the second restore's token %d is above the first's %d: not the defect", BugRestoreIgnoresEpoch, got, issued)
	}
}
