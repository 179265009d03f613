//go:build plantedbugs

package fencekv

import (
	"fmt"
	"slices"
	"strings"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead, where TestingKnobs
// is empty and every planted branch compiles away.

// PlantedBugs lists the store's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugAcceptLowerToken: "a write whose token is below the scope's highest is applied (the highest stays)",
}

// TestingKnobs are per-server test switches (Config.Testing), compiled in
// only with the plantedbugs tag: two servers in one process may differ.
type TestingKnobs struct {
	// PlantedBugs names the defects (keys of PlantedBugs) this server
	// has. Config.Validate refuses a name it does not know.
	PlantedBugs []string
}

// PlantedKnobs returns the knobs with the names this package knows, and
// the names it does not know. Blank names are skipped.
func PlantedKnobs(names []string) (k TestingKnobs, unknown []string) {
	for _, n := range names {
		switch n = strings.TrimSpace(n); {
		case n == "":
		case PlantedBugs[n] != "":
			k.PlantedBugs = append(k.PlantedBugs, n)
		default:
			unknown = append(unknown, n)
		}
	}
	return k, unknown
}

// validate refuses names this package does not know.
func (k *TestingKnobs) validate() error {
	var unknown []string
	for _, n := range k.PlantedBugs {
		if _, ok := PlantedBugs[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("fencekv: unknown planted bugs %s", strings.Join(unknown, ","))
	}
	return nil
}

func (k *TestingKnobs) planted(name string) bool {
	if _, ok := PlantedBugs[name]; !ok {
		panic(fmt.Sprintf("fencekv: no planted bug %q", name)) // a typo in this package
	}
	return slices.Contains(k.PlantedBugs, name)
}
