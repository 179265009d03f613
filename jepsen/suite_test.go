package jepsen

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
)

// The quick suite runs every client planted bug, the keep-alive ones with
// keep-alive workers, one fault-free run of the keep-alive workload and
// one on slow disks.
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
	sd := FilterScenarios(scs, "slow disks")
	if len(sd) != 1 || sd[0].Cfg.KeepAliveWorkers == 0 || len(sd[0].Cfg.Nemeses) != 1 || sd[0].Cfg.Nemeses[0] != history.NemSlowDisk || len(sd[0].Catch) != 0 {
		t.Fatalf("slow disks scenario: %+v", sd)
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

// A scenario that did not pass is named again after the table, with the
// checkers that were not valid and its runs, so that the last lines of a
// CI log say what failed; a passing suite prints no such line.
func TestSuiteReportRepeatsWhatDidNotPass(t *testing.T) {
	results := []checker.Result{
		{Checker: checker.NameTokens, Verdict: checker.Valid},
		{Checker: checker.NameConverge, Verdict: checker.Invalid, Anomaly: "divergent-replicas", Witness: "n2 at index 12\n hash ab " + strings.Repeat("x", 400)},
		{Checker: checker.NameSafeWindows, Verdict: history.Unknown, NotRequired: "clock rate"},
	}
	detail := "11 of 12 checkers valid" + notValid(results)
	res := []ScenarioResult{
		{Name: "fenced, process faults", Pass: true, Detail: "12 of 12 checkers valid", Passed: 12},
		{Name: "fenced, network faults", Pass: false, Detail: detail, Runs: []string{"results/jepsen/run-a"}, Passed: 11, Failed: 1},
	}
	var out strings.Builder
	if passed, failed := WriteSuiteReport(t.TempDir(), res, &out); passed != 23 || failed != 1 {
		t.Fatalf("counted %d passed, %d failed", passed, failed)
	}
	table, at := out.String(), strings.Index(out.String(), "\nNOT PASSED")
	if at < 0 || at < strings.Index(table, "fenced, network faults") {
		t.Fatalf("no recap after the table:\n%s", table)
	}
	recap := table[at:]
	for _, want := range []string{"NOT PASSED: fenced, network faults", "replicas-converge invalid (divergent-replicas): n2 at index 12 hash ab xxx", "…", "runs: results/jepsen/run-a"} {
		if !strings.Contains(recap, want) {
			t.Errorf("the recap lacks %q:\n%s", want, recap)
		}
	}
	if strings.Contains(recap, "process faults") || strings.Contains(recap, checker.NameSafeWindows) {
		t.Errorf("the recap names what passed or was not required:\n%s", recap)
	}
	out.Reset()
	WriteSuiteReport(t.TempDir(), res[:1], &out)
	if strings.Contains(out.String(), "NOT PASSED") {
		t.Errorf("a passing suite printed a recap:\n%s", out.String())
	}
}
