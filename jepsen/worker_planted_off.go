//go:build !plantedbugs

package jepsen

import (
	"fmt"
	"strings"

	"github.com/leasefence/leasefence/client"
)

// PlantedBuild says whether this binary was built with the plantedbugs
// tag, so that its workers can switch on planted client defects.
const PlantedBuild = false

// clientTesting refuses planted client defects: a release build has none.
func clientTesting(bugs []string, _ client.Clock) (client.TestingKnobs, error) {
	if len(bugs) > 0 {
		return client.TestingKnobs{}, fmt.Errorf("planted client bugs %s need a build with -tags plantedbugs", strings.Join(bugs, ","))
	}
	return client.TestingKnobs{}, nil
}
