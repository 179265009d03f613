// Command fencedkv runs the example protected resource: a durable
// key-value store over HTTP that enforces fencing tokens (package
// fence/fencekv has the API).
//
//	fencedkv --listen 127.0.0.1:7100 --data-file data/kv.db [--unfenced] [--rule strict] [--scope S]
//
// Every flag can also be set through an environment variable named
// LEASEFENCE_FENCEDKV_ plus the flag in upper case with '-' as '_' (for
// example LEASEFENCE_FENCEDKV_DATA_FILE); a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/internal/flagenv"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fencedkv:", err)
		return 2
	}
	knobs, bugs, err := plantedKnobs()
	if err != nil {
		fmt.Fprintln(stderr, "fencedkv:", err)
		return 2
	}
	if len(bugs) > 0 {
		fmt.Fprintf(stderr, "fencedkv: PLANTED BUGS ON: %s (a test build for the fault harness; never in production)\n", strings.Join(bugs, ","))
	}
	cfg.Testing = knobs
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	mode := "fenced"
	if cfg.Unfenced {
		mode = "UNFENCED: accepting every token"
	}
	err = fencekv.Run(ctx, cfg, func(addr net.Addr) {
		fmt.Fprintf(stdout, "fencedkv serving on %s (%s)\n", addr, mode)
	})
	if err != nil {
		fmt.Fprintln(stderr, "fencedkv:", err)
		return 1
	}
	return 0
}

func parse(args []string, stderr io.Writer) (fencekv.Config, error) {
	cfg := fencekv.DefaultConfig()
	fs := flag.NewFlagSet("fencedkv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rule, logLevel string
	var logJSON bool
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "host:port to serve HTTP on")
	fs.StringVar(&cfg.DataFile, "data-file", "", "bbolt database file, created if missing (required)")
	fs.BoolVar(&cfg.Unfenced, "unfenced", false, "accept every write whatever its token (control run); writes are still audited")
	fs.StringVar(&rule, "rule", "at-least", "at-least (token >= highest) or strict (token > highest)")
	fs.StringVar(&cfg.Scope, "scope", "", "one fencing scope for every key (default: each key is its own scope)")
	fs.StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	if err := flagenv.Apply(fs, "LEASEFENCE_FENCEDKV_"); err != nil {
		return cfg, err
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if cfg.Rule, err = fence.ParseRule(rule); err != nil {
		return cfg, err
	}
	level := hclog.LevelFromString(logLevel)
	if level == hclog.NoLevel {
		return cfg, fmt.Errorf("unknown log level %q", logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "fencedkv", Level: level, JSONFormat: logJSON, Output: stderr})
	return cfg, cfg.Validate()
}
