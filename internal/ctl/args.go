package ctl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// globalFlags defines --endpoints, --timeout and --json on fs. Every
// command's flag set carries them, so they may appear anywhere on the line.
func (a *app) globalFlags(fs *flag.FlagSet) {
	def := strings.TrimSpace(a.getenv(EnvEndpoints))
	if def == "" {
		def = DefaultEndpoints
	}
	fs.Func("endpoints", "comma-separated `host:port` list of nodes, tried in order (default $"+EnvEndpoints+" or "+DefaultEndpoints+")",
		func(s string) error {
			eps, err := parseEndpoints(s)
			if err != nil {
				return err
			}
			a.endpoints = eps
			return nil
		})
	a.endpoints, _ = parseEndpoints(def)
	fs.DurationVar(&a.timeout, "timeout", DefaultTimeout, "bound on the whole command, retries included (default "+DefaultTimeout.String()+"); 0 means none (acquire --wait, watch and snapshot save: none unless given)")
	fs.BoolVar(&a.json, "json", false, "print one JSON object per result, and errors as JSON on stdout")
	fs.StringVar(&a.tlsCert, "tls-cert", a.getenv(EnvTLSCert), "PEM client certificate `file` for mutual TLS, with --tls-key and --tls-ca (default $"+EnvTLSCert+")")
	fs.StringVar(&a.tlsKey, "tls-key", a.getenv(EnvTLSKey), "PEM private key `file` of --tls-cert (default $"+EnvTLSKey+")")
	fs.StringVar(&a.tlsCA, "tls-ca", a.getenv(EnvTLSCA), "PEM CA `file` that signs the nodes' certificates; turns TLS on (default $"+EnvTLSCA+")")
	fs.StringVar(&a.token, "token", a.getenv(EnvToken), "bearer `token` the cluster's authorization policy maps to an identity (default $"+EnvToken+")")
}

// finishGlobalFlags checks the global flags after fs has been parsed.
func (a *app) finishGlobalFlags(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			a.timeoutSet = true
		}
	})
	if len(a.endpoints) == 0 {
		return usageErrorf("no endpoints: set --endpoints or $%s", EnvEndpoints)
	}
	for _, e := range a.endpoints {
		// Without a port, gRPC would dial :443 and fail later, obscurely.
		host, port, err := net.SplitHostPort(e)
		switch {
		case err != nil && strings.Contains(err.Error(), "missing port"), err == nil && port == "":
			if host == "" {
				host = strings.TrimSuffix(e, ":")
			}
			return usageErrorf("endpoint %q: missing port (want host:port, e.g. %s)", e, net.JoinHostPort(host, "7001"))
		case err != nil:
			return usageErrorf("endpoint %q: want host:port ([host]:port for IPv6): %v", e, err)
		}
	}
	if a.tlsCert != "" || a.tlsKey != "" || a.tlsCA != "" {
		if a.tlsCA == "" {
			return usageErrorf("--tls-cert/--tls-key need --tls-ca (or $%s) to verify the nodes", EnvTLSCA)
		}
		cfg, err := client.LoadTLS(a.tlsCert, a.tlsKey, a.tlsCA)
		if err != nil {
			return usageErrorf("%v", err)
		}
		a.tlsConfig = cfg
	}
	return nil
}

func isGlobalFlag(name string) bool {
	switch name {
	case "endpoints", "timeout", "json", "tls-cert", "tls-key", "tls-ca", "token":
		return true
	}
	return false
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseEndpoints splits a comma-separated list, dropping blanks and
// duplicates and keeping the order.
func parseEndpoints(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" || seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("empty endpoint list")
	}
	return out, nil
}

// reorder moves the flags in args (with their values) in front of the
// positional arguments, so that the standard flag package, which stops at
// the first positional, accepts `acquire jobs/42 --ttl 10s --json`. It
// consults fs to know which flags take a separate value. A "--" ends the
// flags: everything after it is positional, even if it starts with "-".
func reorder(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			pos = append(pos, arg)
			continue
		}
		flags = append(flags, arg)
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil || isBoolFlag(f) {
			continue // unknown flags are reported by fs.Parse
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	out := make([]string, 0, len(flags)+1+len(pos))
	out = append(out, flags...)
	out = append(out, "--")
	return append(out, pos...)
}

// retryCommand returns args (the command line as given, without the
// program name) as one line a POSIX shell runs as leasectl did, every
// argument quoted where it needs it, with "--request-id id" added unless
// addID is false (an id given on the line is in args already). The token's
// value is not echoed: "$LEASEFENCE_TOKEN" stands for it, so that a secret
// does not land in logs. fs tells which flags take a separate value.
func retryCommand(fs *flag.FlagSet, args []string, id string, addID bool) string {
	out := []string{"leasectl"}
	var rest []string // from "--" on: positional, after the added flag
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			rest = args[i:]
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			out = append(out, shellQuote(arg))
			continue
		}
		name, _, inline := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		f := fs.Lookup(name)
		separate := !inline && f != nil && !isBoolFlag(f) && i+1 < len(args)
		switch {
		case name == "token" && inline:
			out = append(out, arg[:strings.IndexByte(arg, '=')+1]+tokenFromEnv)
		case name == "token" && separate:
			out = append(out, arg, tokenFromEnv)
			i++
		case separate:
			out = append(out, shellQuote(arg), shellQuote(args[i+1]))
			i++
		default:
			out = append(out, shellQuote(arg))
		}
	}
	if addID {
		out = append(out, "--request-id", shellQuote(id))
	}
	for _, arg := range rest {
		out = append(out, shellQuote(arg))
	}
	return strings.Join(out, " ")
}

// tokenFromEnv stands for the token's value in a command leasectl prints.
const tokenFromEnv = `"$` + EnvToken + `"`

// shellQuote returns s as one word for a POSIX shell: as is when it holds
// only characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// findCommand finds the command word(s) among args, wherever global or
// command flags put them, and returns the command and args without them.
// It returns flag.ErrHelp for -h, -help or --help before any command.
func findCommand(args []string) (*command, []string, error) {
	known := allFlags()
	var idx []int // positions of positional words, up to two
	for i := 0; i < len(args) && len(idx) < 2; i++ {
		arg := args[i]
		if arg == "--" {
			for j := i + 1; j < len(args) && len(idx) < 2; j++ {
				idx = append(idx, j)
			}
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			idx = append(idx, i)
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if len(idx) == 0 && (name == "h" || name == "help") {
			return nil, nil, flag.ErrHelp
		}
		if strings.Contains(name, "=") {
			continue
		}
		if f := known.Lookup(name); f != nil && !isBoolFlag(f) {
			i++
		}
	}
	if len(idx) == 0 {
		return nil, nil, errors.New("no command given")
	}
	word := args[idx[0]]
	drop := map[int]bool{idx[0]: true}
	if word == "members" || word == "snapshot" {
		if len(idx) < 2 {
			if word == "snapshot" {
				return nil, nil, errors.New("snapshot needs a subcommand: save")
			}
			return nil, nil, errors.New("members needs a subcommand: list, add or remove")
		}
		word += " " + args[idx[1]]
		drop[idx[1]] = true
	}
	cmd := lookupCommand(word)
	if cmd == nil {
		return nil, nil, fmt.Errorf("unknown command %q", word)
	}
	rest := make([]string, 0, len(args))
	for i, arg := range args {
		if !drop[i] {
			rest = append(rest, arg)
		}
	}
	return cmd, rest, nil
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// allFlags is a flag set holding every flag of every command, used only to
// tell which flags take a value while looking for the command word.
func allFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	scratch := newApp(nil, io.Discard, io.Discard)
	scratch.globalFlags(fs)
	for _, c := range commands {
		if c.setup == nil {
			continue
		}
		sub := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(scratch, sub)
		sub.VisitAll(func(f *flag.Flag) {
			if fs.Lookup(f.Name) == nil {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	return fs
}

// flagSetFor returns a fresh flag set with cmd's flags and the global ones,
// for help output.
func (a *app) flagSetFor(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	scratch := newApp(nil, io.Discard, io.Discard)
	scratch.getenv = a.getenv
	if cmd.setup != nil {
		cmd.setup(scratch, fs)
	}
	return fs
}

// parseLeaseID parses a lease id as leasectl and grpcurl print it (base64)
// or as the 32 lowercase hex digits of older releases (api.ParseLeaseID).
func parseLeaseID(s string) ([]byte, error) {
	b, err := api.ParseLeaseID(s)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return b, nil
}

// formatPosition prints a position as INDEX.SEQ, the form --after accepts.
func formatPosition(p *api.Position) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d.%d", p.GetIndex(), p.GetSeq())
}

// parsePosition parses INDEX.SEQ.
func parsePosition(s string) (*api.Position, error) {
	i := strings.IndexByte(s, '.')
	if i < 0 {
		return nil, usageErrorf("--after %q: want INDEX.SEQ, e.g. 120.0", s)
	}
	index, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		return nil, usageErrorf("--after %q: bad index: %v", s, err)
	}
	seq, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return nil, usageErrorf("--after %q: bad seq: %v", s, err)
	}
	return &api.Position{Index: index, Seq: uint32(seq)}, nil
}

const helpHeader = `leasectl is the command-line client of leasefence.

usage: leasectl COMMAND [ARGUMENTS] [FLAGS]
Flags may come before or after the arguments; "--" ends the flags.
`

const helpFooter = `
Each command tries the endpoints in order and moves on when a node is
unavailable; a node that names the leader sends the next try there.

exit status: 0 success; 1 refused by the service (resource held, lease not
found, ...) or acquire --wait timed out waiting; 2 bad usage, invalid
argument, no leader/quorum, outcome unknown, or cluster unreachable (no node
answered); 130 interrupted (watch ends with 0 when interrupted).
Run "leasectl help COMMAND" for a command's flags.
`

func (a *app) printHelp(w io.Writer) {
	fmt.Fprint(w, helpHeader)
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n      %s\n", c.synopsis(a.flagSetFor(c))[len("leasectl "):], c.summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	fs := flag.NewFlagSet("global", flag.ContinueOnError)
	scratch := newApp(nil, io.Discard, io.Discard)
	scratch.getenv = a.getenv
	scratch.globalFlags(fs)
	printFlags(w, fs, true)
	fmt.Fprint(w, helpFooter)
}

func (a *app) printCommandHelp(w io.Writer, cmd *command) {
	fs := a.flagSetFor(cmd)
	fmt.Fprintf(w, "usage: %s\n\n%s\n", cmd.synopsis(fs), cmd.summary)
	if hasOwnFlags(fs) {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs, false)
	}
	fmt.Fprintln(w, "\nglobal flags: --endpoints host:port,... --timeout D --json --tls-cert/--tls-key/--tls-ca FILE (see leasectl help)")
}

func hasOwnFlags(fs *flag.FlagSet) bool {
	any := false
	fs.VisitAll(func(f *flag.Flag) {
		if !isGlobalFlag(f.Name) {
			any = true
		}
	})
	return any
}

func printFlags(w io.Writer, fs *flag.FlagSet, global bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if isGlobalFlag(f.Name) != global {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		if isBoolFlag(f) {
			name = ""
		}
		fmt.Fprintf(tw, "  --%s %s\t%s\n", f.Name, name, usage)
	})
	tw.Flush()
}

// help runs `leasectl help [COMMAND]`.
func (a *app) help(args []string) int {
	var words []string
	for _, arg := range args {
		if !strings.HasPrefix(arg, "-") {
			words = append(words, arg)
		}
	}
	if len(words) == 0 {
		a.printHelp(a.stdout)
		return ExitOK
	}
	name := strings.Join(words, " ")
	cmd := lookupCommand(name)
	if cmd == nil || cmd.setup == nil {
		found := false
		for _, c := range commands {
			if strings.HasPrefix(c.name, name+" ") { // a group: members, snapshot
				a.printCommandHelp(a.stdout, c)
				found = true
			}
		}
		if found {
			return ExitOK
		}
		fmt.Fprintf(a.stderr, "leasectl help: unknown command %q\n", name)
		return ExitFailed
	}
	a.printCommandHelp(a.stdout, cmd)
	return ExitOK
}
