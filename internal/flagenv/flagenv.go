// Package flagenv lets every flag of a command be set from the environment.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Name returns the environment variable for flag name under prefix:
// prefix + the name in upper case with '-' as '_' ("data-dir" under
// "LEASEFENCE_" is LEASEFENCE_DATA_DIR).
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs that has a variable under prefix. Call it
// before fs.Parse, so that flags given on the command line win. The first
// value a flag refuses is reported with the variable's name.
func Apply(fs *flag.FlagSet, prefix string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		name := Name(prefix, f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}
