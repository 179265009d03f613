// Package bench is the implementation of leasebench: load generators for a
// leasefence cluster (acquire-release, contended, renew, read, mixed), the
// measurement loop they share with the etcd comparison driver (package runner),
// and the report (a table or JSON lines, latencies from HDR histograms).
//
// Every loop is bounded in time (the phase's window plus a grace period)
// and in count (MaxOps, the number of setup leases). By default the tool
// talks to loopback addresses only.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/leasefence/leasefence/internal/bench/runner"
)

// Workload names.
const (
	AcquireRelease = "acquire-release"
	Contended      = "contended"
	Renew          = "renew"
	RenewUnary     = "renew-unary"
	Read           = "read"
	Mixed          = "mixed"
)

// Workloads lists every workload, in the order "all" runs them.
var Workloads = []string{AcquireRelease, Contended, Renew, RenewUnary, Read, Mixed}

// Config configures a run. Zero values take the defaults of DefaultConfig.
type Config struct {
	// Workloads to run, in order.
	Workloads []string
	// Concurrency lists the worker counts; every workload runs at each.
	// For renew it is the number of clients, each with its own keep-alive
	// stream.
	Concurrency []int
	// Conns is how many client instances (connections) the workers share,
	// round robin. Default 1, as etcd's benchmark tool.
	Conns int
	// Duration is the measured window of each run; Warmup precedes it.
	Duration, Warmup time.Duration
	// MaxOps bounds the operations of one run (warm-up included).
	MaxOps int64
	// TTL of every lease the tool acquires.
	TTL time.Duration
	// Resources is how many shared resources contended fights over, and
	// how many held resources read and mixed read.
	Resources int
	// Leases is how many live leases renew keeps alive.
	Leases int
	// KeepAliveInterval is the clients' renewal interval (0: ttl/3, the
	// client's default). Set it short to measure renewal capacity.
	KeepAliveInterval time.Duration
	// Endpoints of a running cluster; ignored when LocalCluster > 0.
	Endpoints []string
	// Spread starts the Conns clients at the endpoints in turn (client i
	// at endpoint i mod len), so calls arrive at every node and followers
	// forward theirs, instead of every client starting at the leader.
	// Results are labelled with the workload and " (spread)".
	Spread bool
	// System labels the results (default "leasefence"): two builds
	// compared side by side get a name each.
	System string
	// LocalCluster, when > 0, starts a cluster of that many nodes inside
	// this process (loopback gRPC, raft-boltdb under DataDir) for the run.
	LocalCluster int
	// DataDir is where a local cluster keeps its data (a temporary
	// directory inside it, removed afterwards). Default os.TempDir().
	DataDir string
	// AllowNonLoopback permits endpoints that are not loopback addresses.
	AllowNonLoopback bool
	// JSON prints one JSON object per result instead of a table.
	JSON bool
	// CPUProfile, when set, is the file a CPU profile of the runs (after
	// the local cluster started; it and the clients are in the profile)
	// is written to.
	CPUProfile string
	// Out receives the report; Log receives progress. Default io.Discard.
	Out, Log io.Writer
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Workloads:   []string{AcquireRelease},
		Concurrency: []int{1, 64},
		Conns:       1,
		Duration:    10 * time.Second,
		Warmup:      2 * time.Second,
		MaxOps:      50_000_000,
		TTL:         10 * time.Second,
		Resources:   8,
		Leases:      10_000,
	}
}

// Validate fills zero values from DefaultConfig and checks the fields
// against each other.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if len(c.Workloads) == 0 {
		c.Workloads = d.Workloads
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Conns == 0 {
		c.Conns = d.Conns
	}
	if c.Duration == 0 {
		c.Duration = d.Duration
	}
	if c.MaxOps == 0 {
		c.MaxOps = d.MaxOps
	}
	if c.TTL == 0 {
		c.TTL = d.TTL
	}
	if c.Resources == 0 {
		c.Resources = d.Resources
	}
	if c.Leases == 0 {
		c.Leases = d.Leases
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	var ws []string
	for _, w := range c.Workloads {
		if w == "all" {
			ws = append(ws, Workloads...)
			continue
		}
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("bench: unknown workload %q (one of %s, all)", w, strings.Join(Workloads, ", "))
		}
		ws = append(ws, w)
	}
	c.Workloads = ws
	for _, n := range c.Concurrency {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("bench: concurrency %d outside [1, 10000]", n)
		}
	}
	switch {
	case c.Conns < 1 || c.Conns > 1024:
		return fmt.Errorf("bench: conns %d outside [1, 1024]", c.Conns)
	case c.Duration < 0 || c.Warmup < 0 || c.TTL < 0 || c.KeepAliveInterval < 0:
		return errors.New("bench: negative duration")
	case c.MaxOps < 0:
		return errors.New("bench: negative max-ops")
	case c.Resources < 1 || c.Leases < 1 || c.Leases > 10_000_000:
		return fmt.Errorf("bench: resources %d and leases %d must be positive (leases at most 10M)", c.Resources, c.Leases)
	case c.LocalCluster < 0 || c.LocalCluster > 9:
		return fmt.Errorf("bench: local-cluster %d outside [0, 9]", c.LocalCluster)
	case c.LocalCluster == 0 && len(c.Endpoints) == 0:
		return errors.New("bench: give --endpoints or --local-cluster N")
	case c.KeepAliveInterval > 0 && c.KeepAliveInterval >= c.TTL:
		return fmt.Errorf("bench: keep-alive interval %v must be below the ttl %v", c.KeepAliveInterval, c.TTL)
	}
	if c.LocalCluster == 0 && !c.AllowNonLoopback {
		for _, e := range c.Endpoints {
			if err := runner.CheckLoopback(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run runs every workload at every concurrency and writes the report.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	endpoints := cfg.Endpoints
	if cfg.LocalCluster > 0 {
		fmt.Fprintf(cfg.Log, "leasebench: starting a %d-node cluster in this process\n", cfg.LocalCluster)
		lc, err := StartLocal(ctx, cfg.LocalCluster, cfg.DataDir)
		if err != nil {
			return err
		}
		defer lc.Close()
		endpoints = lc.Endpoints()
	}
	leader, err := LeaderFirst(ctx, endpoints)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Log, "leasebench: leader at %s\n", leader[0])
	if !cfg.Spread {
		endpoints = leader
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	prefix := "leasebench/" + randomHex(4) + "/"
	var results []*runner.Result
	for _, w := range cfg.Workloads {
		for _, n := range cfg.Concurrency {
			fmt.Fprintf(cfg.Log, "leasebench: %s, %d clients, %v warm-up + %v\n", w, n, cfg.Warmup, cfg.Duration)
			r, err := runWorkload(ctx, cfg, endpoints, fmt.Sprintf("%s%s/%d/", prefix, w, n), w, n)
			if err != nil {
				return fmt.Errorf("bench: %s at %d clients: %w", w, n, err)
			}
			r.System = cmp.Or(cfg.System, "leasefence")
			r.Workload = w
			if cfg.Spread {
				r.Workload += " (spread)"
			}
			results = append(results, r)
		}
	}
	return runner.Report(cfg.Out, results, cfg.JSON)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
