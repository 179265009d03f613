//go:build plantedbugs

package main

import (
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/internal/planted"
)

// plantedKnobs returns the store's testing knobs with the defects
// LEASEFENCE_PLANTED_BUGS names: a test build for the fault harness only.
func plantedKnobs() (fencekv.TestingKnobs, []string, error) {
	return planted.Knobs("fencedkv", fencekv.PlantedKnobs)
}
