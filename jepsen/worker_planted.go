//go:build plantedbugs

package jepsen

import "github.com/leasefence/leasefence/client"

// PlantedBuild says whether this binary was built with the plantedbugs
// tag, so that its workers can switch on planted client defects.
const PlantedBuild = true

// clientTesting returns the client library's testing knobs for a worker
// with the planted client defects bugs; host is the simulated host's
// monotonic clock (client-monotonic-clock measures on it).
func clientTesting(bugs []string, host client.Clock) (client.TestingKnobs, error) {
	return client.TestingKnobs{PlantedBugs: bugs, MonotonicClock: host}, nil
}
