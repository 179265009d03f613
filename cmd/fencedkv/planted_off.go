//go:build !plantedbugs

package main

import "github.com/leasefence/leasefence/internal/planted"

// plantBugs refuses LEASEFENCE_PLANTED_BUGS: this build has no planted
// defects.
func plantBugs() ([]string, error) { return planted.Plant("fencedkv", false, nil) }
