//go:build plantedbugs

package fencekv

import (
	"fmt"
	"strings"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead.

// PlantedBugs lists the store's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugAcceptLowerToken: "a write whose token is below the scope's highest is applied (the highest stays)",
}

var plantedOn = map[string]bool{}

// PlantBugs switches on the named defects this package knows and returns
// the names it does not know. Call it before Serve.
func PlantBugs(names []string) (unknown []string) {
	for _, n := range names {
		n = strings.TrimSpace(n)
		if _, ok := PlantedBugs[n]; ok {
			plantedOn[n] = true
		} else if n != "" {
			unknown = append(unknown, n)
		}
	}
	return unknown
}

func planted(name string) bool {
	if _, ok := PlantedBugs[name]; !ok {
		panic(fmt.Sprintf("fencekv: no planted bug %q", name)) // a typo in this package
	}
	return plantedOn[name]
}
