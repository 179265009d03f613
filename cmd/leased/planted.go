//go:build plantedbugs

package main

import (
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/planted"
)

// plantedKnobs returns the node's testing knobs with the defects
// LEASEFENCE_PLANTED_BUGS names: a test build for the fault harness only.
func plantedKnobs() (cluster.TestingKnobs, []string, error) {
	return planted.Knobs("leased", cluster.PlantedKnobs)
}
