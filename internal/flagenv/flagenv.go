// Package flagenv lets every flag of a command be set from the environment.
package flagenv

import (
	"flag"
	"fmt"
	"io"
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

// ApplyFile sets flags from a config file of `name = value` lines, where
// name is a flag's name; blank lines and lines starting with '#' are
// skipped. An unknown name or a bad value is an error naming the line.
// Call it before Apply and fs.Parse: the environment and the command line
// win over the file.
func ApplyFile(fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return fmt.Errorf("%s:%d: want `name = value`", path, i+1)
		}
		value = strings.Trim(value, `"`)
		if fs.Lookup(name) == nil {
			return fmt.Errorf("%s:%d: unknown key %q", path, i+1, name)
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %v", path, i+1, name, err)
		}
	}
	return nil
}

// Print writes every flag of fs except those in skip as `name = value`
// lines, with its usage as a comment: a config file that ApplyFile reads
// back to the same settings.
func Print(w io.Writer, fs *flag.FlagSet, skip ...string) {
	fs.VisitAll(func(f *flag.Flag) {
		for _, s := range skip {
			if f.Name == s {
				return
			}
		}
		fmt.Fprintf(w, "# %s\n%s = %s\n", f.Usage, f.Name, f.Value.String())
	})
}

// Lookup returns the value of flag name in args (`--name v`, `-name v`,
// `--name=v`), or "" when it is not given.
func Lookup(args []string, name string) string {
	for i, a := range args {
		t := strings.TrimLeft(a, "-")
		if t == name && a != t && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(t, name+"="); ok && a != t {
			return v
		}
	}
	return ""
}
