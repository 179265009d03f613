// Package planted reads which planted defects a test build of leased or
// fencedkv switches on. The defects themselves live beside the code they
// break, in files built only with the plantedbugs tag; see jepsen/README.md,
// "Planted bugs".
package planted

import (
	"fmt"
	"os"
	"strings"
)

// Env names the defects to switch on, comma-separated.
const Env = "LEASEFENCE_PLANTED_BUGS"

// Names returns the defects Env names (none when it is unset or empty).
func Names() []string {
	var out []string
	for _, n := range strings.Split(os.Getenv(Env), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Plant switches the named defects on through plant, which returns the
// names it does not know. It refuses unknown names, and any name at all in
// a build without the tag (tagged false).
func Plant(prog string, tagged bool, plant func([]string) []string) (on []string, err error) {
	names := Names()
	if len(names) == 0 {
		return nil, nil
	}
	if !tagged {
		return nil, fmt.Errorf("%s is set, but this %s was built without planted bugs (go build -tags plantedbugs)", Env, prog)
	}
	if unknown := plant(names); len(unknown) > 0 {
		return nil, fmt.Errorf("%s: unknown planted bugs %s", Env, strings.Join(unknown, ","))
	}
	return names, nil
}
