// Command leasebench measures a leasefence cluster: acquire-release,
// contended, renew, read and mixed workloads, against --endpoints or a
// cluster it starts itself (--local-cluster 3). See docs/PERFORMANCE.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/leasefence/leasefence/internal/bench"
)

func main() {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("leasebench", flag.ContinueOnError)
	workloads := fs.String("workload", strings.Join(cfg.Workloads, ","), "comma-separated: "+strings.Join(bench.Workloads, ", ")+", or all")
	conc := fs.String("concurrency", "1,64", "comma-separated worker counts; each workload runs at each (renew: clients)")
	endpoints := fs.String("endpoints", os.Getenv("LEASEFENCE_ENDPOINTS"), "comma-separated node addresses (default $LEASEFENCE_ENDPOINTS)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "client instances (connections) the workers share")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured window of each run")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unrecorded warm-up before each window")
	fs.Int64Var(&cfg.MaxOps, "max-ops", cfg.MaxOps, "bound on the operations of one run")
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "lease ttl")
	fs.IntVar(&cfg.Resources, "resources", cfg.Resources, "shared resources (contended) / held resources (read, mixed)")
	fs.IntVar(&cfg.Leases, "leases", cfg.Leases, "live leases kept alive (renew)")
	fs.DurationVar(&cfg.KeepAliveInterval, "keepalive-interval", 0, "renewal interval of every lease (0: ttl/3)")
	fs.IntVar(&cfg.LocalCluster, "local-cluster", 0, "start an N-node cluster in this process instead of using --endpoints")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "where --local-cluster keeps its data (default: the temp dir)")
	fs.StringVar(&cfg.System, "system", "leasefence", "label of the results (to compare two builds: one label each)")
	fs.BoolVar(&cfg.Spread, "spread", false, "start the --conns clients at the endpoints in turn (calls through followers), not all at the leader")
	fs.BoolVar(&cfg.AllowNonLoopback, "allow-nonloopback", false, "permit endpoints that are not loopback addresses")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON object per result")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	cfg.Workloads = split(*workloads)
	cfg.Endpoints = split(*endpoints)
	cfg.Concurrency = nil
	for _, s := range split(*conc) {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "leasebench: bad --concurrency %q\n", s)
			os.Exit(2)
		}
		cfg.Concurrency = append(cfg.Concurrency, n)
	}
	cfg.Out, cfg.Log = os.Stdout, os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
