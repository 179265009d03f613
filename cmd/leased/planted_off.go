//go:build !plantedbugs

package main

import (
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/planted"
)

// plantedKnobs refuses LEASEFENCE_PLANTED_BUGS: this build has no planted
// defects.
func plantedKnobs() (cluster.TestingKnobs, []string, error) {
	return planted.Knobs[cluster.TestingKnobs]("leased", nil)
}
