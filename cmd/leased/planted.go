//go:build plantedbugs

package main

import (
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/planted"
)

// plantBugs switches on the defects LEASEFENCE_PLANTED_BUGS names: a test
// build for the fault harness only.
func plantBugs() ([]string, error) { return planted.Plant("leased", true, cluster.PlantBugs) }
