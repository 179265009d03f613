//go:build plantedbugs

package client_test

import (
	"testing"

	"github.com/leasefence/leasefence/client"
)

// Each planted client defect is caught by the safe-window check, on a
// client of its own (the knob is per client).
//
//	go test -tags plantedbugs -run TestSafeWindowCheckCatchesEachPlantedClientBug ./client/
func TestSafeWindowCheckCatchesEachPlantedClientBug(t *testing.T) {
	for _, bug := range []string{client.BugSentAtOnAnswer, client.BugFullTTL, client.BugNoDrift, client.BugZeroMargin} {
		t.Run(bug, func(t *testing.T) {
			safe, a, drift, margin := safeWindowRun(t, bug, func(c *client.Config) {
				c.Testing.PlantedBugs = []string{bug}
			})
			err := checkSafeWindow(safe, a, drift, margin)
			if err == nil {
				t.Fatalf("%s (%s) not caught", bug, client.PlantedBugs[bug])
			}
			t.Logf("caught: %v", err)
		})
	}
	if _, err := client.New(client.Config{Endpoints: []string{endpoint}, Testing: client.TestingKnobs{PlantedBugs: []string{"no-such-bug"}}}); err == nil {
		t.Fatal("an unknown planted bug was accepted")
	}
}
