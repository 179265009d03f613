//go:build plantedbugs

package client

import (
	"fmt"
	"slices"
	"strings"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead, where TestingKnobs
// is empty and every planted branch compiles away.

// PlantedBugs lists the client's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugSentAtOnAnswer: "sent_at is taken when the answer arrives: the safe window is stretched by the answer's delay",
	BugFullTTL:        "the full ttl is used instead of ttl_remaining: a replayed or late grant's window is overstated",
	BugNoDrift:        "the drift bound is ignored: the window is ttl_remaining×drift too long",
	BugZeroMargin:     "no client margin is subtracted: successive holders' windows may touch",
}

// TestingKnobs are per-client test switches, compiled in only with the
// plantedbugs tag. Two clients in one process may differ.
type TestingKnobs struct {
	// PlantedBugs names the defects (keys of PlantedBugs) this client has.
	PlantedBugs []string
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
		return fmt.Errorf("client: unknown planted bugs %s", strings.Join(unknown, ","))
	}
	return nil
}

func (k *TestingKnobs) planted(name string) bool { return slices.Contains(k.PlantedBugs, name) }
