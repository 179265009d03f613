//go:build !plantedbugs

package main

import (
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/internal/planted"
)

// plantedKnobs refuses LEASEFENCE_PLANTED_BUGS: this build has no planted
// defects.
func plantedKnobs() (fencekv.TestingKnobs, []string, error) {
	return planted.Knobs[fencekv.TestingKnobs]("fencedkv", nil)
}
