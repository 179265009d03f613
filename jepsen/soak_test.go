package jepsen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	"github.com/leasefence/leasefence/jepsen/report"
)

func TestSoakTableHasARowPerRunAndTotals(t *testing.T) {
	dir := t.TempDir()
	pass := &Summary{Config: Config{Seed: 2}, Ops: map[string]map[string]int{history.OpAcquire: {history.OK: 10, history.Fail: 5}, history.OpWrite: {history.OK: 3}},
		Faults: map[string]int{history.NemKill: 2, history.NemPause: 1}, FaultsEffective: map[string]int{history.NemKill: 2, history.NemPause: 1},
		Results: []checker.Result{{Checker: "a", Verdict: checker.Valid}}, Passed: 1}
	bad := &Summary{Config: Config{Seed: 1}, Ops: map[string]map[string]int{history.OpAcquire: {history.OK: 4}},
		Faults: map[string]int{history.NemKill: 1}, FaultsEffective: map[string]int{},
		Results: []checker.Result{{Checker: "a", Verdict: checker.Invalid}, {Checker: "b", Verdict: checker.Invalid, NotRequired: "out of spec"}}, Failed: 1}
	short := &Summary{Config: Config{Seed: 4}, Results: []checker.Result{{Checker: "a", Verdict: checker.Valid},
		{Checker: "run-meaningful", Verdict: history.Unknown}, {Checker: "c", Verdict: history.Unknown, NotRequired: "out of spec"}}, Failed: 1}
	for name, s := range map[string]*Summary{"r2": pass, "r1": bad, "r4": short} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(dir, name, "summary.json"), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "r3-killed"), 0o755); err != nil { // no summary.json
		t.Fatal(err)
	}
	rows, err := ReadSoak(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := report.SoakTable(rows)
	for _, want := range []string{
		"| 1 | anomaly | 4 | kill 1/0 | 1 |",
		"| 2 | pass | 18 | kill 2/2, pause 1/1 | 0 |",
		"| 0 | harness error | 0 | — | 0 |",
		"| 4 | undecided: run-meaningful | 0 | — | 0 |",
		"| **4 runs** | **1 passed** | **22** | kill 3/2, pause 1/1 | **1** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 7 {
		t.Errorf("%d lines, want header, rule, 4 runs, totals:\n%s", n, got)
	}
}
