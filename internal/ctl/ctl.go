// Package ctl implements leasectl, the command-line client of leasefence.
//
// Everything the binary does lives here so that tests (unit tests against a
// fake service, and end-to-end tests against a real cluster) can drive it
// through Main or Run with their own arguments and writers; cmd/leasectl only
// calls Main and exits with its status.
//
// leasectl is a thin layer over package client, as etcdctl is over
// clientv3: every call goes through client.Invoke, the client's one call
// loop, so failover (the configured endpoints in turn, a leader hint first),
// retries, request ids, TLS and the bearer token are the client's, and a fix
// to any of them reaches the CLI too. This package parses the command line,
// builds requests, and turns answers and the client's errors into output and
// exit statuses (see report).
package ctl

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/client"
)

// Exit statuses of Main and Run.
const (
	// ExitOK: the command succeeded (including `release` of an unknown id,
	// which reports "released false", and a watch ended by an interrupt).
	ExitOK = 0
	// ExitRefused: the service refused the request (FailedPrecondition,
	// NotFound, AlreadyExists, PermissionDenied, ResourceExhausted), or
	// acquire --wait ran out of its --timeout while the resource stayed held
	// ("timed out waiting; held by ...").
	ExitRefused = 1
	// ExitFailed: bad usage, InvalidArgument, no leader/quorum (a node
	// answered that it knows no leader), an outcome unknown (a write sent
	// without an answer; acquire prints the command that learns it), an
	// unreachable cluster (no node answered before the client's retries or
	// the deadline ran out), or any other error that is not a refusal.
	ExitFailed = 2
	// ExitInterrupted: a command other than watch was cancelled by SIGINT or
	// SIGTERM before it finished (128 + SIGINT, the shell convention). The
	// outcome of a write cancelled in flight is unknown; acquire prints the
	// whole command again with its request id, which returns that outcome.
	ExitInterrupted = 130
)

const (
	// EnvEndpoints names the environment variable that supplies the default
	// of --endpoints: a comma-separated list of host:port.
	EnvEndpoints = "LEASEFENCE_ENDPOINTS"
	// DefaultEndpoints is the default of --endpoints when EnvEndpoints is unset.
	DefaultEndpoints = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
	// EnvTLSCert, EnvTLSKey and EnvTLSCA supply the defaults of --tls-cert,
	// --tls-key and --tls-ca.
	EnvTLSCert = "LEASEFENCE_TLS_CERT"
	EnvTLSKey  = "LEASEFENCE_TLS_KEY"
	EnvTLSCA   = "LEASEFENCE_TLS_CA"
	// EnvToken supplies the default of --token.
	EnvToken = "LEASEFENCE_TOKEN"
	// DefaultTimeout bounds each command, retries included. acquire --wait
	// and watch have no default bound.
	DefaultTimeout = 5 * time.Second
)

// Main runs leasectl with args (without the program name) and returns the
// exit status. SIGINT and SIGTERM cancel the running command: a watch then
// ends with ExitOK, any other command with ExitInterrupted.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, stdin, stdout, stderr)
}

// Run is Main without signal handling: cancelling ctx acts as an interrupt.
// It reads LEASEFENCE_ENDPOINTS from the environment. Run is safe to call
// from several goroutines at once; each call has its own connections, which
// it closes before returning.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(stdin, stdout, stderr).run(ctx, args)
}

// app is one invocation of leasectl.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	hostname       func() (string, error)
	buildInfo      func() (*debug.BuildInfo, bool)
	// retryFor is the client's Config.RetryFor (zero: the client's
	// default); connectTimeout bounds one connection attempt.
	retryFor       time.Duration
	connectTimeout time.Duration

	// args is the command line as given (without the program name).
	args []string

	// Global flags, valid once parse has run.
	endpoints  []string
	timeout    time.Duration
	timeoutSet bool
	json       bool
	// Mutual TLS (--tls-*): tlsConfig is built from the files by
	// finishGlobalFlags; nil means plaintext.
	tlsCert, tlsKey, tlsCA string
	tlsConfig              *tls.Config
	// token (--token) is sent as "authorization: Bearer <token>".
	token string
	// unbounded: the command has no default bound (acquire --wait, watch,
	// snapshot save); only an explicit --timeout applies. Set by the
	// command's setup or flags.
	unbounded bool

	cl *client.Client
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{
		stdin:          stdin,
		stdout:         stdout,
		stderr:         stderr,
		getenv:         os.Getenv,
		hostname:       os.Hostname,
		buildInfo:      debug.ReadBuildInfo,
		connectTimeout: connectTimeout,
	}
}

// command is one leasectl subcommand. setup defines the command's own flags
// on fs and returns the function that runs it with the positional arguments
// and a context bounded by --timeout (commandContext).
type command struct {
	name    string // "acquire", or "members add"
	args    string // positional synopsis, e.g. "RESOURCE"
	summary string
	minArgs int
	maxArgs int
	// required lists flags that must be given; help shows them unbracketed.
	required []string
	setup    func(a *app, fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

func (c *command) synopsis(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("leasectl ")
	b.WriteString(c.name)
	if c.args != "" {
		b.WriteString(" " + c.args)
	}
	var required, optional []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case isGlobalFlag(f.Name):
		case slices.Contains(c.required, f.Name):
			required = append(required, f)
		default:
			optional = append(optional, f)
		}
	})
	for _, f := range append(required, optional...) {
		item := "--" + f.Name
		if !isBoolFlag(f) {
			name, _ := flag.UnquoteUsage(f)
			if name == "" {
				name = "VALUE"
			}
			item += " " + strings.ToUpper(name)
		}
		if !slices.Contains(c.required, f.Name) {
			item = "[" + item + "]"
		}
		b.WriteString(" " + item)
	}
	return b.String()
}

func (a *app) run(ctx context.Context, args []string) int {
	a.args = args
	cmd, rest, err := findCommand(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.printHelp(a.stdout)
			return ExitOK
		}
		fmt.Fprintf(a.stderr, "leasectl: %v\n", err)
		if group := commandGroup(args); group != "" {
			fmt.Fprintf(a.stderr, "run \"leasectl help %s\" for its commands\n", group)
		} else {
			fmt.Fprintln(a.stderr, `run "leasectl help" for the commands`)
		}
		return ExitFailed
	}
	if cmd.name == "help" {
		return a.help(rest)
	}

	fs := flag.NewFlagSet("leasectl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.globalFlags(fs)
	runCmd := cmd.setup(a, fs)
	if err := fs.Parse(reorder(fs, rest)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.printCommandHelp(a.stdout, cmd)
			return ExitOK
		}
		return a.usageFailure(cmd, fs, err)
	}
	if err := a.finishGlobalFlags(fs); err != nil {
		return a.usageFailure(cmd, fs, err)
	}
	pos := fs.Args()
	if len(pos) < cmd.minArgs || len(pos) > cmd.maxArgs {
		return a.usageFailure(cmd, fs, usageErrorf("%s takes %s", cmd.name, arity(cmd)))
	}

	if a.cl, err = a.newClient(); err != nil {
		return a.usageFailure(cmd, fs, err)
	}
	defer a.cl.Close()
	cctx, cancel := a.commandContext(ctx, a.unbounded)
	defer cancel()
	err = runCmd(cctx, pos)
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return a.usageFailure(cmd, fs, err)
	}
	return a.report(ctx, err)
}

func arity(c *command) string {
	switch {
	case c.minArgs == c.maxArgs && c.maxArgs == 0:
		return "no arguments"
	case c.minArgs == c.maxArgs:
		return fmt.Sprintf("%d argument(s): %s", c.minArgs, c.args)
	default:
		return fmt.Sprintf("%d to %d argument(s): %s", c.minArgs, c.maxArgs, c.args)
	}
}

// commandGroup returns "members" or "snapshot" when the first word of args
// names a group of commands, else "".
func commandGroup(args []string) string {
	for _, arg := range args {
		if strings.HasPrefix(arg, "-") {
			continue
		}
		if arg == "members" || arg == "snapshot" {
			return arg
		}
		return ""
	}
	return ""
}

// usageFailure reports a usage error on stderr (and as a JSON object on
// stdout with --json) and returns ExitFailed.
func (a *app) usageFailure(cmd *command, fs *flag.FlagSet, err error) int {
	if a.json {
		a.printJSON(map[string]any{"error": err.Error(), "code": "Usage"})
	}
	fmt.Fprintf(a.stderr, "leasectl %s: %v\nusage: %s\nrun \"leasectl help %s\" for its flags\n", cmd.name, err, cmd.synopsis(fs), cmd.name)
	return ExitFailed
}

// commandContext bounds ctx by --timeout. When the command has no default
// bound (acquire --wait, watch) only an explicit --timeout applies. A
// timeout of zero or less means no bound.
func (a *app) commandContext(ctx context.Context, unboundedByDefault bool) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 || (unboundedByDefault && !a.timeoutSet) {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// usageError is a mistake on the command line, found before any call.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
