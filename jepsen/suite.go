package jepsen

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// Scenario is one run of a suite and what it must show: every checker
// valid, or (a control run, a planted bug) an anomaly from one of Catch.
type Scenario struct {
	Name string
	Cfg  Config
	// Catch, when set, names the checkers of which at least one must
	// report the run invalid; otherwise every checker must be valid.
	Catch []string
	// Attempts bounds the runs (different seeds) to catch the anomaly.
	Attempts int
}

// ScenarioResult is a scenario's outcome in suite.json.
type ScenarioResult struct {
	Name   string   `json:"name"`
	Pass   bool     `json:"pass"`
	Runs   []string `json:"runs"`
	Detail string   `json:"detail"`
	// Checkers counts this scenario's checker results: for a run that
	// must be valid each checker is one; a run that must be caught is one.
	Passed int `json:"passed"`
	Failed int `json:"failed"`
}

// QuickSuite is `make jepsen-quick`: the fenced run with every nemesis,
// the keep-alive workload without faults and on slow disks, the unfenced
// control, and one short run per planted bug (up to three
// seeds each), all on base's settings.
func QuickSuite(base Config, bugs []string) []Scenario {
	var out []Scenario
	for _, g := range FencedGroups {
		c := base
		c.Nemeses, c.Duration = g.Nemeses, g.Time
		out = append(out, Scenario{Name: "fenced, " + g.Name, Cfg: c})
	}
	ka := base
	ka.Nemeses, ka.Duration, ka.KeepAliveWorkers = nil, 40*time.Second, KeepAliveWorkers
	out = append(out, Scenario{Name: "fenced, realistic ttls (10s, 30s)", Cfg: ka})
	// Slow disks with the keep-alive workload: its leases must live
	// through commits that take over a second (keepalive-leases-kept).
	sd := base
	sd.Nemeses, sd.Duration, sd.KeepAliveWorkers = []string{history.NemSlowDisk}, 45*time.Second, KeepAliveWorkers
	out = append(out, Scenario{Name: "fenced, slow disks, keep-alive leases", Cfg: sd})
	ctl := base
	ctl.Unfenced, ctl.Nemeses, ctl.Duration, ctl.LinWorkers = true, []string{history.NemClientPause}, 20*time.Second, 0
	out = append(out, Scenario{Name: "unfenced control", Cfg: ctl, Catch: []string{checker.NameFencedTokens, checker.NameFinalRead}, Attempts: 3})
	for _, name := range bugs {
		b, err := FindPlantedBug(name)
		if err != nil {
			continue
		}
		c := base
		c.Bugs, c.Nemeses, c.Duration = []string{b.Name}, b.Nemeses, b.Time
		if b.KeepAlive {
			c.KeepAliveWorkers = KeepAliveWorkers
		}
		out = append(out, Scenario{Name: "planted bug " + b.Name, Cfg: c, Catch: b.Catch, Attempts: 3})
	}
	return out
}

// FencedGroups are the quick suite's fenced runs: every in-spec nemesis,
// in three groups so that each gets injected within a short run, and the
// restore from a backup on its own (its run requires the fencing checkers
// and restore-beats-lost-tokens, not what a restore loses by design).
var FencedGroups = []struct {
	Name    string
	Nemeses []string
	Time    time.Duration
}{
	{"process faults", []string{history.NemKill, history.NemKillLeader, history.NemPause, history.NemPauseLeader, history.NemClientPause, history.NemClientPauseAcquire, history.NemClientPauseReplay, history.NemSnapshot, history.NemMember, history.NemLostVoter}, 90 * time.Second},
	{"network faults", nm.NetNemeses, 60 * time.Second},
	{"clock faults", []string{history.NemClockBump, history.NemClockStrobe}, 25 * time.Second},
	{"clocks at the drift edge", []string{history.NemClockDriftEdge}, 30 * time.Second},
	{"clocks at the drift edge, read in ticks", []string{history.NemClockDriftEdgeCoarse}, 45 * time.Second},
	{"combined faults", nm.ComboNemeses, 45 * time.Second},
	{"restore from a backup", []string{history.NemRestore, history.NemRestoreMismatch, history.NemRestoreAgain}, 35 * time.Second},
	// On its own (not with snapshot), so that the nodes keep their whole
	// log and the watch stream has no gaps from snapshot installs
	// (nemesis.SnapshotArgs): every checker decides.
	{"the leader's unwritten tail lost", []string{history.NemLoseTail}, 45 * time.Second},
}

// FilterScenarios keeps the scenarios whose name contains one of the
// comma-separated strings of only (all of them when only is empty).
func FilterScenarios(scenarios []Scenario, only string) []Scenario {
	if strings.TrimSpace(only) == "" {
		return scenarios
	}
	var out []Scenario
	for _, sc := range scenarios {
		for _, s := range strings.Split(only, ",") {
			if s = strings.TrimSpace(s); s != "" && strings.Contains(sc.Name, s) {
				out = append(out, sc)
				break
			}
		}
	}
	return out
}

// KeepAliveWorkers is how many keep-alive workers the suite's runs of
// that workload have.
const KeepAliveWorkers = 3

// RunSuite runs each scenario in turn and returns its results; the
// closing line counts scenarios × checkers. An error is a harness failure.
func RunSuite(ctx context.Context, scenarios []Scenario, out *os.File) ([]ScenarioResult, error) {
	var res []ScenarioResult
	for _, sc := range scenarios {
		r := ScenarioResult{Name: sc.Name}
		attempts := max(sc.Attempts, 1)
		for a := 0; a < attempts; a++ {
			cfg := sc.Cfg
			cfg.Seed += uint64(a)
			cfg.Out = out
			fmt.Fprintf(out, "\n=== %s (run %d of at most %d, seed %d)\n", sc.Name, a+1, attempts, cfg.Seed)
			sum, err := Run(ctx, cfg)
			if err != nil {
				dir := ""
				if sum != nil {
					dir = " (" + sum.Dir + ")"
				}
				return append(res, r), fmt.Errorf("%s: %w%s", sc.Name, err, dir)
			}
			r.Runs = append(r.Runs, sum.Dir)
			if len(sc.Catch) == 0 {
				r.Passed, r.Failed = sum.Passed, sum.Failed
				r.Pass = sum.AllValid()
				r.Detail = fmt.Sprintf("%d of %d checkers valid", sum.Passed, sum.Passed+sum.Failed) + notValid(sum.Results)
				break
			}
			var caught []string
			for _, x := range sum.Results {
				for _, c := range sc.Catch {
					if x.Checker == c && x.Verdict == checker.Invalid {
						caught = append(caught, fmt.Sprintf("%s (%s)", x.Checker, x.Anomaly))
					}
				}
			}
			if len(caught) > 0 {
				r.Pass, r.Passed, r.Failed = true, 1, 0
				r.Detail = fmt.Sprintf("caught in run %d by %s", a+1, strings.Join(caught, ", "))
				break
			}
			r.Passed, r.Failed = 0, 1
			r.Detail = fmt.Sprintf("NOT caught in %d runs (expected %s)", a+1, strings.Join(sc.Catch, " or "))
		}
		res = append(res, r)
	}
	return res, nil
}

// witnessLen bounds a witness quoted in a scenario's detail.
const witnessLen = 240

// notValid names the required results of a run that are not valid, with
// their anomaly and the start of their witness ("" when every one is).
func notValid(results []checker.Result) string {
	var out []string
	for _, x := range results {
		if x.Verdict == checker.Valid || x.NotRequired != "" {
			continue
		}
		s := x.Checker + " " + x.Verdict
		if x.Anomaly != "" {
			s += " (" + x.Anomaly + ")"
		}
		if w := strings.Join(strings.Fields(x.Witness), " "); w != "" {
			s += ": " + checker.Shorten(w, witnessLen)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return ""
	}
	return "; not valid: " + strings.Join(out, "; ")
}

// WriteSuiteReport prints the table, then each scenario that did not pass
// again with its runs' directories (the last lines a CI log keeps), and
// the closing line, and writes suite.json under dir.
func WriteSuiteReport(dir string, res []ScenarioResult, out io.Writer) (passed, failed int) {
	fmt.Fprintf(out, "\n%-48s %-5s %s\n", "scenario", "pass", "detail")
	for _, r := range res {
		mark := "yes"
		if !r.Pass {
			mark = "NO"
		}
		fmt.Fprintf(out, "%-48s %-5s %s\n", r.Name, mark, r.Detail)
		passed += r.Passed
		failed += r.Failed
	}
	for _, r := range res {
		if !r.Pass {
			fmt.Fprintf(out, "\nNOT PASSED: %s: %s\n  runs: %s\n", r.Name, r.Detail, strings.Join(r.Runs, ", "))
		}
	}
	_ = os.MkdirAll(dir, 0o755)
	_ = writeJSON(filepath.Join(dir, fmt.Sprintf("suite-%s.json", time.Now().UTC().Format("20060102T150405"))), res)
	fmt.Fprintf(out, "\n%d passed, %d failed  (scenarios × checkers; %d scenarios)\n", passed, failed, len(res))
	return passed, failed
}

// PlantedBugNames lists every planted bug.
func PlantedBugNames() []string {
	var out []string
	for _, b := range PlantedBugs {
		out = append(out, b.Name)
	}
	return out
}
