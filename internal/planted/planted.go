// Package planted reads which planted defects a test build of leased or
// fencedkv switches on: the environment is the harness's interface, and
// main puts what it names into the config's testing knobs. The defects
// themselves live beside the code they break, in files built only with
// the plantedbugs tag, switched on per instance by those knobs; see
// jepsen/README.md, "Planted bugs".
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

// Knobs returns the testing knobs of prog that Env names, made by knobs,
// which also returns the names it does not know, and the names switched
// on. It refuses unknown names, and any name at all in a build without
// the tag (knobs nil).
func Knobs[K any](prog string, knobs func([]string) (K, []string)) (k K, on []string, err error) {
	names := Names()
	if len(names) == 0 {
		return k, nil, nil
	}
	if knobs == nil {
		return k, nil, fmt.Errorf("%s is set, but this %s was built without planted bugs (go build -tags plantedbugs)", Env, prog)
	}
	k, unknown := knobs(names)
	if len(unknown) > 0 {
		var zero K
		return zero, nil, fmt.Errorf("%s: unknown planted bugs %s", Env, strings.Join(unknown, ","))
	}
	return k, names, nil
}
