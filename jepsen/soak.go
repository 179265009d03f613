package jepsen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasefence/leasefence/jepsen/checker"
)

// SoakRow is one run of a soak (`make jepsen-soak`), read from its
// summary.json.
type SoakRow struct {
	Seed uint64
	Dir  string
	// Result is "pass" (every checker valid), "anomaly" (a required
	// checker found one), "harness error", or "undecided: <checkers>" (no
	// anomaly, but those required checkers could not decide: not a pass).
	Result string
	// Ops counts completed operations of every type and result.
	Ops int
	// Faults and Effective count faults started, and seen to take
	// effect, by kind.
	Faults, Effective map[string]int
	// Anomalies counts required checkers that found the run invalid.
	Anomalies int
}

// SoakRowOf summarises one run.
func SoakRowOf(s *Summary) SoakRow {
	r := SoakRow{Seed: s.Config.Seed, Dir: s.Dir, Faults: s.Faults, Effective: s.FaultsEffective}
	for _, byResult := range s.Ops {
		for _, n := range byResult {
			r.Ops += n
		}
	}
	for _, x := range s.Results {
		if x.Verdict == checker.Invalid && x.Required() {
			r.Anomalies++
		}
	}
	switch {
	case r.Anomalies > 0:
		r.Result = "anomaly"
	case s.HarnessError != "":
		r.Result = "harness error"
	case s.AllValid() && s.NotCounted == 0:
		r.Result = "pass"
	default:
		var undecided []string
		for _, x := range s.Results {
			if x.Verdict != checker.Valid && x.Required() {
				undecided = append(undecided, x.Checker)
			}
		}
		r.Result = "undecided: " + strings.Join(undecided, ", ")
	}
	return r
}

// ReadSoak reads the summary.json of every run folder directly under dir,
// in seed order. A folder without one (a harness killed mid-run) is a
// "harness error" row.
func ReadSoak(dir string) ([]SoakRow, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var rows []SoakRow
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "summary.json"))
		if err != nil {
			rows = append(rows, SoakRow{Dir: filepath.Join(dir, e.Name()), Result: "harness error"})
			continue
		}
		var s Summary
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: summary.json: %w", e.Name(), err)
		}
		rows = append(rows, SoakRowOf(&s))
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Seed < rows[j].Seed })
	return rows, nil
}

// SoakTable renders rows as a Markdown table, one row per run and a last
// row of totals (runs passed, operations, faults by kind, anomalies), for
// jepsen/README.md.
func SoakTable(rows []SoakRow) string {
	var b strings.Builder
	b.WriteString("| seed | result | operations | faults by kind (started/effective) | anomalies |\n")
	b.WriteString("|---:|---|---:|---|---:|\n")
	total := SoakRow{Faults: map[string]int{}, Effective: map[string]int{}}
	passed := 0
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %d |\n", r.Seed, r.Result, r.Ops, faultsString(r.Faults, r.Effective), r.Anomalies)
		if r.Result == "pass" {
			passed++
		}
		total.Ops += r.Ops
		total.Anomalies += r.Anomalies
		for k, n := range r.Faults {
			total.Faults[k] += n
		}
		for k, n := range r.Effective {
			total.Effective[k] += n
		}
	}
	fmt.Fprintf(&b, "| **%d runs** | **%d passed** | **%d** | %s | **%d** |\n", len(rows), passed, total.Ops,
		faultsString(total.Faults, total.Effective), total.Anomalies)
	return b.String()
}

func faultsString(started, effective map[string]int) string {
	if len(started) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range sortedKeys(started) {
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, started[k], effective[k]))
	}
	return strings.Join(parts, ", ")
}
