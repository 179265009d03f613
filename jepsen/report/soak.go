package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
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
	for _, k := range slices.Sorted(maps.Keys(started)) {
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, started[k], effective[k]))
	}
	return strings.Join(parts, ", ")
}
