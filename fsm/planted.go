//go:build plantedbugs

package fsm

import (
	"fmt"
	"strings"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead, where planted is a
// constant false and every planted branch compiles away.

// PlantedBugs lists the FSM's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugGrantNoMargin:           "a new grant waits only for expires_at, not expires_at + skew margin",
	BugRenewAfterExpiry:        "a renewal is accepted after expires_at (until the lease is removed)",
	BugSnapshotDropsCounters:   "snapshots store a scope's counter as its live lease's token (0 when free)",
	BugRestoreBumpsKnownScopes: "a restore raises only the counters of scopes the backup knows, not the token floor: a scope first used after the backup starts again at 1",
	BugDedupResourceOnly:       "a request id's retry is compared by resource only, so it replays across scopes, holders, ttls and wait",
	BugSkipEntryChecksum:       "log entry checksums are not verified: not by Apply, not by the node's log store",
}

var plantedOn = map[string]bool{}

// PlantBugs switches on the named defects this package knows and returns
// the names it does not know. Call it before the first Apply, on every
// replica alike: a planted bug is still deterministic.
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
		panic(fmt.Sprintf("fsm: no planted bug %q", name)) // a typo in this package
	}
	return plantedOn[name]
}

// ResetPlantedBugs switches every planted defect off again, for a test
// that planted one. Call it only while no State is applying entries.
func ResetPlantedBugs() { clear(plantedOn) }
