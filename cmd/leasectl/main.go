// Command leasectl is the command-line client of leasefence. Run
// "leasectl help" for its commands; all of it lives in internal/ctl.
package main

import (
	"os"

	"github.com/leasefence/leasefence/internal/ctl"
)

func main() {
	os.Exit(ctl.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
