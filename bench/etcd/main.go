// Command etcdbench drives etcd with the cycle that matches a leasefence
// acquire+release, for the side-by-side comparison in bench/etcd-compare.sh:
// grant a lease, put the key only if absent with that lease attached (the
// response header's revision serves as the fencing token), revoke the lease
// (which deletes the key). It shares its measurement loop and report with
// leasebench (internal/bench/runner), so the figures are comparable.
//
// It lives in its own module so that etcd's client never enters
// leasefence's go.mod.
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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasefence/leasefence/internal/bench/runner"
)

type config struct {
	workloads   []string
	concurrency []int
	conns       int
	endpoints   []string
	duration    time.Duration
	warmup      time.Duration
	maxOps      int64
	ttl         time.Duration
	resources   int
	anyAddr     bool
	leaderOnly  bool
	spread      bool
	json        bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "report" {
		if err := report(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	fs := flag.NewFlagSet("etcdbench", flag.ContinueOnError)
	workloads := fs.String("workload", "acquire-release", "comma-separated: acquire-release, contended, renew-unary")
	conc := fs.String("concurrency", "1,64", "comma-separated worker counts")
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated etcd client addresses")
	fs.IntVar(&cfg.conns, "conns", 1, "etcd client instances (connections) the workers share")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured window of each run")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "unrecorded warm-up before each window")
	fs.Int64Var(&cfg.maxOps, "max-ops", 50_000_000, "bound on the operations of one run")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease ttl (whole seconds)")
	fs.IntVar(&cfg.resources, "resources", 8, "shared keys (contended)")
	fs.BoolVar(&cfg.anyAddr, "allow-nonloopback", false, "permit endpoints that are not loopback addresses")
	fs.BoolVar(&cfg.leaderOnly, "leader-only", false, "wait for a leader and send to its endpoint only")
	fs.BoolVar(&cfg.spread, "spread", false, "pin the --conns clients to the endpoints in turn (calls through followers); results labelled \"(spread)\"")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per result")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	cfg.workloads = split(*workloads)
	cfg.endpoints = split(*endpoints)
	for _, s := range split(*conc) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10_000 {
			fmt.Fprintf(os.Stderr, "etcdbench: bad --concurrency %q\n", s)
			os.Exit(2)
		}
		cfg.concurrency = append(cfg.concurrency, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "etcdbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.conns < 1 || cfg.resources < 1 || cfg.ttl < time.Second {
		return errors.New("conns and resources must be positive, ttl at least 1s")
	}
	if !cfg.anyAddr {
		for _, e := range cfg.endpoints {
			if err := runner.CheckLoopback(e); err != nil {
				return err
			}
		}
	}
	if cfg.leaderOnly && cfg.spread {
		return errors.New("--leader-only and --spread exclude each other")
	}
	if cfg.leaderOnly {
		leader, err := findLeader(ctx, cfg.endpoints)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "etcdbench: leader at %s\n", leader)
		cfg.endpoints = []string{leader}
	}
	var clients []*clientv3.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := range cfg.conns {
		eps := cfg.endpoints
		if cfg.spread {
			eps = []string{cfg.endpoints[i%len(cfg.endpoints)]}
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	prefix := fmt.Sprintf("etcdbench/%d/", time.Now().UnixNano())
	var results []*runner.Result
	for _, w := range cfg.workloads {
		for _, n := range cfg.concurrency {
			fmt.Fprintf(os.Stderr, "etcdbench: %s, %d clients, %v warm-up + %v\n", w, n, cfg.warmup, cfg.duration)
			if w == "renew-unary" {
				r, err := renewUnary(ctx, cfg, clients, n)
				if err != nil {
					return fmt.Errorf("%s at %d clients: %w", w, n, err)
				}
				results = append(results, r)
				continue
			}
			keys := make([]string, n)
			shared := w == "contended"
			switch w {
			case "acquire-release":
				for i := range keys {
					keys[i] = fmt.Sprintf("%s%d/own/%d", prefix, n, i)
				}
			case "contended":
				keys = keys[:cfg.resources]
				for i := range keys {
					keys[i] = fmt.Sprintf("%s%d/shared/%d", prefix, n, i)
				}
			default:
				return fmt.Errorf("unknown workload %q", w)
			}
			ttl := int64(cfg.ttl / time.Second)
			op := func(ctx context.Context, wk int, i int64) (runner.Sample, error) {
				key := keys[wk%len(keys)]
				if shared {
					key = keys[(int64(wk)+i)%int64(len(keys))]
				}
				return cycle(ctx, clients[wk%len(clients)], key, ttl)
			}
			r, err := runner.Measure(ctx, runner.Phase{Concurrency: n, Warmup: cfg.warmup, Duration: cfg.duration, MaxOps: cfg.maxOps}, op)
			if err != nil {
				return fmt.Errorf("%s at %d clients: %w", w, n, err)
			}
			r.System, r.Workload = "etcd", label(w, cfg)
			r.Notes = "one op = LeaseGrant + Txn(put if create_revision==0, with the lease) + LeaseRevoke (three Raft commits); token = header revision"
			results = append(results, r)
		}
	}
	return runner.Report(os.Stdout, results, cfg.json)
}

// label names a result's workload as leasebench does.
func label(w string, cfg config) string {
	if cfg.spread {
		return w + " (spread)"
	}
	return w
}

// renewUnary measures KeepAliveOnce, the counterpart of leasefence's unary
// Renew: each of n workers holds one lease of cfg.ttl and renews it again
// and again.
func renewUnary(ctx context.Context, cfg config, clients []*clientv3.Client, n int) (*runner.Result, error) {
	ids := make([]clientv3.LeaseID, n)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for w, id := range ids {
			if id != 0 {
				_, _ = clients[w%len(clients)].Revoke(ctx, id)
			}
		}
	}()
	for w := range n {
		g, err := clients[w%len(clients)].Grant(ctx, int64(cfg.ttl/time.Second))
		if err != nil {
			return nil, fmt.Errorf("setup grant: %w", err)
		}
		ids[w] = g.ID
	}
	r, err := runner.Measure(ctx, runner.Phase{Concurrency: n, Warmup: cfg.warmup, Duration: cfg.duration, MaxOps: cfg.maxOps},
		func(ctx context.Context, w int, _ int64) (runner.Sample, error) {
			_, err := clients[w%len(clients)].KeepAliveOnce(ctx, ids[w])
			return runner.Sample{}, err
		})
	if err != nil {
		return nil, err
	}
	r.System, r.Workload = "etcd", label("renew-unary", cfg)
	r.Notes = "one op = KeepAliveOnce of the worker's own lease (a leader-local renewal: etcd does not replicate lease renewals through Raft)"
	return r, nil
}

// cycle grants a lease, puts key only if absent with the lease attached,
// and revokes the lease. A key that exists is a refusal (held).
func cycle(ctx context.Context, c *clientv3.Client, key string, ttl int64) (runner.Sample, error) {
	g, err := c.Grant(ctx, ttl)
	if err != nil {
		return runner.Sample{}, fmt.Errorf("grant: %w", err)
	}
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "etcdbench", clientv3.WithLease(g.ID))).
		Commit()
	if err != nil {
		return runner.Sample{}, fmt.Errorf("txn: %w", err)
	}
	_ = resp.Header.Revision // the fencing token of this grant
	if _, err := c.Revoke(ctx, g.ID); err != nil {
		return runner.Sample{}, fmt.Errorf("revoke: %w", err)
	}
	return runner.Sample{Refused: !resp.Succeeded}, nil
}

// findLeader polls the endpoints' status until one of them is the leader,
// for up to 15s.
func findLeader(ctx context.Context, endpoints []string) (string, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var last error
	for {
		for _, e := range endpoints {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, e)
			scancel()
			if err != nil {
				last = err
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				return e, nil
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return "", fmt.Errorf("no etcd leader found at %v: %v", endpoints, last)
		}
	}
}

// report reads result files (JSON lines from leasebench and etcdbench) and
// prints them as one table, then the ratios of system a to system b
// (leasefence / etcd unless "-a NAME -b NAME" come first).
func report(args []string) error {
	fs := flag.NewFlagSet("etcdbench report", flag.ContinueOnError)
	a := fs.String("a", "leasefence", "system whose figures are the numerators")
	b := fs.String("b", "etcd", "system whose figures are the denominators")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	var all []*runner.Result
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		rs, err := runner.ReadJSON(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, rs...)
	}
	if err := runner.Report(os.Stdout, all, false); err != nil {
		return err
	}
	fmt.Println()
	return runner.Compare(os.Stdout, all, *a, *b)
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
