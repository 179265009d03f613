package jepsen

import (
	"strings"
	"testing"
)

// The quick suite runs every client planted bug, the keep-alive one with
// keep-alive workers, and one fault-free run of the keep-alive workload.
func TestQuickSuiteHasTheClientBugsAndTheKeepAliveRun(t *testing.T) {
	scs := QuickSuite(DefaultConfig(), PlantedBugNames())
	byName := map[string]Scenario{}
	for _, sc := range scs {
		byName[sc.Name] = sc
	}
	for _, b := range PlantedBugs {
		sc, ok := byName["planted bug "+b.Name]
		if !ok {
			t.Errorf("no scenario for %s", b.Name)
			continue
		}
		if b.In == "client" && len(sc.Catch) == 0 {
			t.Errorf("%s: no checker must catch it", b.Name)
		}
		if b.KeepAlive != (sc.Cfg.KeepAliveWorkers > 0) {
			t.Errorf("%s: keep-alive workers %d", b.Name, sc.Cfg.KeepAliveWorkers)
		}
	}
	ka := FilterScenarios(scs, "realistic ttls")
	if len(ka) != 1 || ka[0].Cfg.KeepAliveWorkers == 0 || len(ka[0].Cfg.Nemeses) != 0 || len(ka[0].Catch) != 0 {
		t.Fatalf("realistic ttls scenario: %+v", ka)
	}
	for _, sc := range FilterScenarios(scs, "client-, nothing-matches") {
		if !strings.Contains(sc.Name, "client-") {
			t.Errorf("filter kept %q", sc.Name)
		}
	}
	if n := len(FilterScenarios(scs, "")); n != len(scs) {
		t.Errorf("empty filter kept %d of %d", n, len(scs))
	}
}
