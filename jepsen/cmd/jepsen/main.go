// Command jepsen runs leasefence's fault-injection harness (package
// jepsen): real leased nodes, a real fencedkv and real worker processes on
// loopback, faults on a seeded schedule, and checkers over the recorded
// history. See jepsen/README.md.
//
//	jepsen [--nodes 3] [--workers 6] [--resources 3] [--time 60s] [--quiet 5s]
//	       [--nemesis all|none|kill,kill-leader,pause,pause-leader,client-pause,snapshot,member,
//	                  partition-leader,partition-halves,partition-ring,partition-bridge,partition-oneway,
//	                  net-slow,net-flaky,kill-minority,rolling-restart,partition-kill,
//	                  clock-bump,clock-strobe,clock-rate,restore]
//	       [--net proxy|netns|docker] [--image leasefence:dev] [--bug NAME]
//	       [--seed N] [--unfenced] [--expect-anomaly] [--results DIR] [--bin-dir DIR]
//	jepsen check RESULTS_DIR    # run the checkers again over a stored run
//	jepsen soak-table DIR       # a Markdown table of the runs under DIR (make jepsen-soak)
//
// Exit status: 0 every required checker valid (with --expect-anomaly: an
// anomaly was found, i.e. the control run was caught), 1 an anomaly or an
// undecided checker (unknown never counts as a pass), 2 the harness failed.
// With clock-rate (out of spec) the exclusion checkers are not required;
// with restore (a restore from a backup loses acknowledged state by design)
// neither are they, nor durability and linearizability.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/jepsen"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/nemesis"
	"github.com/leasefence/leasefence/jepsen/report"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return jepsen.WorkerMain(args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "check" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: jepsen check RESULTS_DIR")
			return 2
		}
		rs, err := jepsen.Recheck(args[1], stdout)
		if err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return 2
		}
		if _, failed := checker.Tally(rs); failed > 0 {
			return 1
		}
		return 0
	}
	if len(args) > 0 && args[0] == "soak-table" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: jepsen soak-table DIR")
			return 2
		}
		rows, err := jepsen.ReadSoak(args[1])
		if err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return 2
		}
		fmt.Fprint(stdout, report.SoakTable(rows))
		return 0
	}
	suite := len(args) > 0 && args[0] == "suite"
	if suite {
		args = args[1:]
	}
	cfg := jepsen.DefaultConfig()
	cfg.Out = stdout
	fs := flag.NewFlagSet("jepsen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nemeses, bugs string
	var expectAnomaly bool
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "leased nodes (at least 3)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes")
	fs.IntVar(&cfg.Resources, "resources", cfg.Resources, "resources the workers contend for")
	fs.IntVar(&cfg.LinWorkers, "lin-workers", cfg.LinWorkers, "workers of the linearizability workload (0: none)")
	fs.IntVar(&cfg.LinResources, "lin-resources", cfg.LinResources, "resources of the linearizability workload")
	fs.IntVar(&cfg.KeepAliveWorkers, "keepalive-workers", cfg.KeepAliveWorkers, "workers of the keep-alive workload: 10s and 30s ttls across idle gaps (0: none)")
	fs.DurationVar(&cfg.Duration, "time", cfg.Duration, "workload with faults")
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "final phase without faults")
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "the workers' lease ttl")
	fs.DurationVar(&cfg.SkewMargin, "skew-margin", cfg.SkewMargin, "the nodes' --skew-margin")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()%1e6), "seed of the schedule and the workers")
	fs.StringVar(&nemeses, "nemesis", "all", "comma-separated nemeses, all or none")
	fs.StringVar(&cfg.NetMode, "net", cfg.NetMode, "how network nemeses are realised: proxy (per-link TCP proxies, no root), netns (a network namespace per node, iptables; root) or docker (the nodes are containers of --image on a private Docker network; root)")
	fs.StringVar(&cfg.Image, "image", jepsen.DefaultDockerImage, "the nodes' image in docker mode (make image; nothing is pulled)")
	fs.BoolVar(&cfg.Unfenced, "unfenced", false, "run fencedkv with --unfenced (the control run)")
	fs.BoolVar(&expectAnomaly, "expect-anomaly", false, "exit 0 only if a checker finds an anomaly (for the control run)")
	fs.StringVar(&cfg.ResultsDir, "results", cfg.ResultsDir, "parent folder of the results folders")
	fs.StringVar(&cfg.BinDir, "bin-dir", "", "prebuilt leased and fencedkv (default: go build them)")
	fs.BoolVar(&cfg.Race, "race", false, "build the nodes with the race detector")
	bugsHelp := "planted bugs to switch on (a test build; see jepsen/README.md): " + strings.Join(jepsen.PlantedBugNames(), ",")
	if suite {
		bugsHelp = "planted bugs the suite must catch, one short run each: all, none or a list"
		bugs = "all"
	}
	fs.StringVar(&bugs, "bug", bugs, bugsHelp)
	var only string
	if suite {
		fs.StringVar(&only, "only", "", "run only the scenarios whose name contains one of these comma-separated strings")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if cfg.Nemeses, err = nemesis.ParseNemeses(nemeses); err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return 2
	}
	switch bugs {
	case "none", "":
		bugs = ""
	case "all":
		bugs = strings.Join(jepsen.PlantedBugNames(), ",")
	}
	var bugList []string
	for _, b := range strings.Split(bugs, ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if _, err := jepsen.FindPlantedBug(b); err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return 2
		}
		bugList = append(bugList, b)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if suite {
		return runSuite(ctx, cfg, bugList, only, stdout, stderr)
	}
	cfg.Bugs = bugList
	sum, err := jepsen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen: harness failure:", err)
		if sum != nil {
			fmt.Fprintln(stderr, "jepsen: logs in", sum.Dir)
		}
		return 2
	}
	switch {
	case expectAnomaly && sum.Anomalous():
		fmt.Fprintln(stdout, "control run: the anomaly was caught, as expected")
		return 0
	case expectAnomaly:
		fmt.Fprintln(stdout, "control run: NO anomaly found; the harness failed to show what it should")
		return 1
	case sum.AllValid():
		return 0
	}
	return 1
}

// runSuite builds the binaries once (plain, and with planted bugs) and
// runs the quick suite: the fenced run, the control, one run per bug.
func runSuite(ctx context.Context, cfg jepsen.Config, bugs []string, only string, stdout, stderr io.Writer) int {
	out, ok := stdout.(*os.File)
	if !ok {
		out = os.Stdout
	}
	tmp, err := os.MkdirTemp("", "jepsen-suite-")
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	plain, planted := cfg.BinDir, filepath.Join(tmp, "planted")
	if plain == "" {
		plain = filepath.Join(tmp, "plain")
		if err := jepsen.Build(ctx, plain, cfg.Race, false, false); err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return 2
		}
	}
	if len(bugs) > 0 {
		// cmd/jepsen too: its workers carry the client's planted bugs.
		if err := jepsen.Build(ctx, planted, cfg.Race, true, true); err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return 2
		}
	}
	cfg.BinDir = plain
	scenarios := jepsen.FilterScenarios(jepsen.QuickSuite(cfg, bugs), only)
	for i := range scenarios {
		if len(scenarios[i].Cfg.Bugs) > 0 {
			scenarios[i].Cfg.BinDir = planted
			scenarios[i].Cfg.Self = filepath.Join(planted, "jepsen")
		}
	}
	res, err := jepsen.RunSuite(ctx, scenarios, out)
	_, failed := jepsen.WriteSuiteReport(cfg.ResultsDir, res, out)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen: harness failure:", err)
		return 2
	}
	if failed > 0 {
		return 1
	}
	return 0
}
