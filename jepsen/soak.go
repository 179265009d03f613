package jepsen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasefence/leasefence/jepsen/report"
)

import (
	"github.com/leasefence/leasefence/jepsen/checker"
)

// SoakRowOf summarises one run.
func SoakRowOf(s *Summary) report.SoakRow {
	r := report.SoakRow{Seed: s.Config.Seed, Dir: s.Dir, Faults: s.Faults, Effective: s.FaultsEffective}
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
func ReadSoak(dir string) ([]report.SoakRow, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var rows []report.SoakRow
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "summary.json"))
		if err != nil {
			rows = append(rows, report.SoakRow{Dir: filepath.Join(dir, e.Name()), Result: "harness error"})
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
