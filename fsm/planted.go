//go:build plantedbugs

package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead, where TestingKnobs
// is empty and every planted branch compiles away.

// PlantedBugs lists the FSM's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugGrantNoMargin:           "a new grant waits only for expires_at, not expires_at + skew margin",
	BugRenewAfterExpiry:        "a renewal is accepted after expires_at (until the lease is removed)",
	BugSnapshotDropsCounters:   "snapshots store a scope's counter as its live lease's token (0 when free)",
	BugRestoreBumpsKnownScopes: "a restore raises only the counters of scopes the backup knows, not the token floor: a scope first used after the backup starts again at 1",
	BugDedupResourceOnly:       "a request id's retry is compared by resource only, so it replays across scopes, holders, ttls and wait",
	BugSkipEntryChecksum:       "log entry checksums are not verified: not by Apply, not by the node's log store",
	BugIgnorableUnchecked:      "an entry of an unknown ignorable type is skipped without its checksum: a type byte's flipped high bit skips a committed entry",
}

// TestingKnobs are per-State test switches (WithTestingKnobs), compiled in
// only with the plantedbugs tag: two States in one process may differ.
// Every replica of a cluster must be given the same knobs: a planted bug
// is still deterministic.
type TestingKnobs struct {
	// PlantedBugs names the defects (keys of PlantedBugs) this State has.
	// A name this package does not know switches nothing on; Validate
	// refuses it.
	PlantedBugs []string
}

// Validate refuses names this package does not know.
func (k *TestingKnobs) Validate() error {
	var unknown []string
	for _, n := range k.PlantedBugs {
		if _, ok := PlantedBugs[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("fsm: unknown planted bugs %s", strings.Join(unknown, ","))
	}
	return nil
}

func (k *TestingKnobs) planted(name string) bool {
	if _, ok := PlantedBugs[name]; !ok {
		panic(fmt.Sprintf("fsm: no planted bug %q", name)) // a typo in this package
	}
	return k != nil && slices.Contains(k.PlantedBugs, name)
}
