//go:build plantedbugs

package client

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead, where TestingKnobs
// is empty and every planted branch compiles away.

// PlantedBugs lists the client's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugSentAtOnAnswer:        "sent_at is taken when the answer arrives: the safe window is stretched by the answer's delay",
	BugFullTTL:               "the full ttl is used instead of ttl_remaining: a replayed or late grant's window is overstated",
	BugNoDrift:               "the drift bound is ignored: the window is ttl_remaining×drift too long",
	BugZeroMargin:            "no client margin is subtracted: successive holders' windows may touch",
	BugSilenceFromLastAnswer: "a keep-alive stream's silence is counted from its last answer alone: after an idle spell a healthy stream is torn down and each renewal sent twice",
	BugMonotonicClock:        "safe deadlines are measured on Go's monotonic clock, which stops while the host is suspended: a suspend stretches the window by its length",
}

// TestingKnobs are per-client test switches, compiled in only with the
// plantedbugs tag. Two clients in one process may differ.
type TestingKnobs struct {
	// PlantedBugs names the defects (keys of PlantedBugs) this client has.
	PlantedBugs []string
	// MonotonicClock is what Go's monotonic clock reads on this client's
	// host, for BugMonotonicClock: a test that simulates a host suspend
	// passes a clock that stops while the "host" sleeps (the harness's
	// worker stops its process and this clock together), while
	// Config.Clock, like CLOCK_BOOTTIME, keeps counting. Nil: Go's own
	// monotonic clock, which on Linux does not stop for SIGSTOP.
	MonotonicClock Clock
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

// clock returns the clock the client measures safe deadlines on: c, or,
// with BugMonotonicClock, the host's monotonic clock.
func (k *TestingKnobs) clock(c Clock) Clock {
	if !k.planted(BugMonotonicClock) {
		return c
	}
	if k.MonotonicClock != nil {
		return k.MonotonicClock
	}
	return goMonotonic{start: time.Now()}
}

// goMonotonic is Go's monotonic clock, measured from start.
type goMonotonic struct{ start time.Time }

func (g goMonotonic) Now() time.Duration { return time.Since(g.start) }
