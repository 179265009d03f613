// Command fencedemo shows, with real processes, what fencing tokens
// prevent: a worker frozen with SIGSTOP before its write wakes up after its
// lease has moved on, and its stale write is refused (or, in the unfenced
// control run, overwrites the newer one). `make demo` runs it; package
// internal/demo has the whole of it.
//
//	fencedemo [--bin-dir bin] [--ttl 2s] [--fenced|--unfenced]
package main

import (
	"os"

	"github.com/leasefence/leasefence/internal/demo"
)

func main() { os.Exit(demo.Main(os.Args[1:], os.Stdout, os.Stderr)) }
