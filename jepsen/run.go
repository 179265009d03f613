package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
	"github.com/leasefence/leasefence/jepsen/report"
	"github.com/leasefence/leasefence/jepsen/slowdisk"
)

// Config is one run. Everything needed to replay it is here (and in
// config.json); the seed drives the nemesis schedule and the workers.
type Config struct {
	Nodes     int `json:"nodes"`
	Workers   int `json:"workers"`
	Resources int `json:"resources"`
	// LinWorkers run the linearizability workload on LinResources
	// resources (acquire, read, release with a ttl longer than the run).
	LinWorkers int `json:"lin_workers"`
	// KeepAliveWorkers run the keep-alive workload (keepalive.go) on as
	// many resources: 10 s and 30 s ttls held across idle gaps; with any,
	// renewals-bounded is checked.
	KeepAliveWorkers int `json:"keepalive_workers,omitempty"`
	LinResources     int `json:"lin_resources"`
	// Duration is the workload with faults; Quiet the final phase without
	// faults (every fault healed) before the workers stop.
	Duration   time.Duration `json:"duration"`
	Quiet      time.Duration `json:"quiet"`
	TTL        time.Duration `json:"ttl"`
	SkewMargin time.Duration `json:"skew_margin"`
	Seed       uint64        `json:"seed"`
	Nemeses    []string      `json:"nemeses"`
	// NetMode realises the network nemeses: NetProxy (default; "" means
	// it), NetNS (root) or NetDocker (the nodes are containers of Image).
	NetMode string `json:"net_mode"`
	// Image is the nodes' image in docker mode (default DefaultDockerImage).
	Image string `json:"image,omitempty"`
	// Unfenced runs fencedkv with enforcement off: the control run.
	Unfenced bool `json:"unfenced"`
	// ResultsDir receives one folder per run.
	ResultsDir string `json:"results_dir"`
	// BinDir holds prebuilt leased and fencedkv; empty means build them.
	BinDir string `json:"bin_dir,omitempty"`
	Race   bool   `json:"race"`
	// Bugs are planted defects to switch on (PlantedBugs); the binaries
	// are then built with the plantedbugs tag.
	Bugs []string `json:"bugs,omitempty"`
	// Self is the jepsen binary, run as "Self worker ..." for each worker.
	// With a planted client bug (In "client") it must be a plantedbugs
	// build; empty means this binary if it is one, otherwise one is built.
	Self string `json:"self"`
	// DriftEdge is set by Run when NemClockDriftEdge is enabled: the
	// settings it ran with (driftedge.go).
	DriftEdge *DriftEdge `json:"drift_edge,omitempty"`
	// Out receives progress and the report; nil means stdout.
	Out io.Writer `json:"-"`
}

// DefaultConfig is a full run's configuration: 5 nodes, 10 workers over 5
// resources, every in-spec nemesis in proxy mode.
func DefaultConfig() Config {
	return Config{Nodes: 5, Workers: 10, Resources: 5, LinWorkers: 3, LinResources: 2, Duration: 60 * time.Second, Quiet: 5 * time.Second,
		TTL: 2 * time.Second, SkewMargin: 300 * time.Millisecond, Seed: 1, Nemeses: nm.InSpecNemeses(), NetMode: NetProxy,
		ResultsDir: filepath.Join("results", "jepsen")}
}

// Summary is summary.json.
type Summary struct {
	Dir     string `json:"dir"`
	Config  Config `json:"config"`
	Started string `json:"started"`
	// Ops counts completions by type and result.
	Ops map[string]map[string]int `json:"ops"`
	// Faults counts faults started by kind; FaultsEffective those verified
	// to have taken effect.
	Faults          map[string]int `json:"faults"`
	FaultsEffective map[string]int `json:"faults_effective"`
	WatchEvents     int            `json:"watch_events"`
	// Resolution says how many unknown acquires the nodes' Raft logs
	// decided; DumpErrors lists nodes whose log could not be read.
	Resolution   *ResolveStats     `json:"resolution,omitempty"`
	DumpErrors   []string          `json:"dump_errors,omitempty"`
	Results      []checker.Result  `json:"results"`
	Passed       int               `json:"passed"`
	Failed       int               `json:"failed"`
	Durations    map[string]string `json:"durations"`
	HarnessError string            `json:"harness_error,omitempty"`

	// NotCounted counts results that are neither passed nor failed: not
	// required (see Result.NotRequired) and not valid.
	NotCounted int `json:"not_counted,omitempty"`
}

// Anomalous reports whether a required checker found an anomaly (invalid).
func (s *Summary) Anomalous() bool {
	for _, r := range s.Results {
		if r.Verdict == checker.Invalid && r.Required() {
			return true
		}
	}
	return false
}

// AllValid reports whether every checker passed.
func (s *Summary) AllValid() bool { return len(s.Results) > 0 && s.Failed == 0 }

// reportRun is what report.html shows of the summary.
func (s *Summary) reportRun() report.Run {
	return report.Run{
		Dir: s.Dir, Seed: s.Config.Seed, Nodes: s.Config.Nodes, Workers: s.Config.Workers, Resources: s.Config.Resources,
		Nemeses: s.Config.Nemeses, Unfenced: s.Config.Unfenced,
		Results: s.Results, Passed: s.Passed, Failed: s.Failed, NotCounted: s.NotCounted,
	}
}

type workerProc struct {
	id     string
	proc   *Proc
	paused chan PauseNotice
}

var _ nm.Worker = (*workerProc)(nil)

// ID implements nemesis.Worker.
func (w *workerProc) ID() string { return w.id }

// Running implements nemesis.Worker.
func (w *workerProc) Running() bool { return w.proc.Running() }

// PauseAt implements nemesis.Worker: it sends the worker the pause
// command for kind (CmdPause, CmdPauseAcquire, CmdPauseReplay).
func (w *workerProc) PauseAt(kind string) error {
	cmd := CmdPause
	switch kind {
	case history.NemClientPauseAcquire:
		cmd = CmdPauseAcquire
	case history.NemClientPauseReplay:
		cmd = CmdPauseReplay
	}
	return w.proc.Send(cmd)
}

// Paused implements nemesis.Worker.
func (w *workerProc) Paused() <-chan PauseNotice { return w.paused }

// WaitStopped implements nemesis.Worker.
func (w *workerProc) WaitStopped(timeout time.Duration) bool { return w.proc.WaitStopped(timeout) }

// Resume implements nemesis.Worker.
func (w *workerProc) Resume() error { return w.proc.Signal(syscall.SIGCONT) }

func asWorkers(ws []*workerProc) []nm.Worker {
	out := make([]nm.Worker, len(ws))
	for i, w := range ws {
		out[i] = w
	}
	return out
}

// ResourcePrefix starts every resource the fenced workers lease; the
// watcher follows WatchPrefix, which covers them, LinPrefix and the
// sentinel.
const (
	ResourcePrefix = "jr/"
	WatchPrefix    = "j"
)

// Run runs one test, in phases: prepare (config, results folder),
// binaries, start the cluster and fencedkv, open the logs, start the
// watcher, the workers and the availability probers, the workload under
// the nemesis and the quiet phase, collect (sentinel, final reads, audit,
// convergence, Raft logs), check, and print. An error is a harness
// failure; the checkers' verdicts are in the Summary.
func Run(ctx context.Context, cfg Config) (sum *Summary, err error) {
	r, err := prepareRun(cfg)
	if err != nil {
		return nil, err
	}
	sum = r.sum
	defer func() {
		if err != nil {
			sum.HarnessError = err.Error()
		}
		r.phase("total", r.t0)
		writeJSON(filepath.Join(r.dir, "summary.json"), sum)
	}()
	defer r.cleanup()
	if err := writeJSON(filepath.Join(r.dir, "config.json"), r.cfg); err != nil {
		return sum, err
	}
	r.say("run %s, seed %d, %s, results in %s", r.mode, r.cfg.Seed, strings.Join(r.cfg.Nemeses, ","), r.dir)
	if e := r.edge; e != nil {
		r.say("clock-drift-edge: drift %g, max ttl %v, skew margin %v; fenced workers' client margin %v, client clocks at %g×; no lin or keep-alive workers",
			e.Drift, e.MaxTTL, e.SkewMargin, e.ClientMargin, e.ClientClockRate)
	}
	if len(r.dropped) > 0 {
		r.say("left out in %s mode, which cannot realise them (see Network faults in jepsen/README.md): %s", r.cfg.NetMode, strings.Join(r.dropped, ","))
	}
	for _, step := range []func(context.Context) error{
		r.binaries, r.startCluster, r.openLogs, r.startWatcher, r.startWorkers, r.startProbes,
		r.workload, r.collect, r.check,
	} {
		if err := step(ctx); err != nil {
			return sum, err
		}
	}
	r.print()
	if sum.AllValid() && sum.NotCounted == 0 {
		r.dropDataDirs()
	}
	return sum, nil
}

// run is the state one Run shares between its phases.
type run struct {
	cfg     Config
	t0      time.Time
	durs    map[string]string
	mode    string
	dir     string
	dropped []string // nemeses the net mode cannot realise
	linTTL  time.Duration
	edge    *DriftEdge // clock-drift-edge's settings, or nil (driftedge.go)
	sum     *Summary

	// cleanups run last to first when Run returns, as defers would.
	cleanups []func()

	binDir string
	cl     *Cluster
	kvProc *Proc
	kvURL  string
	kv     *fencekv.Client

	hist, nlog, alog *history.Writer

	wt        *watcher
	stopWatch context.CancelFunc
	wwg       sync.WaitGroup

	rng                    *rand.Rand
	resources, kaResources []string
	workers, fencedWorkers []*workerProc
	badLines               int
	badMu                  sync.Mutex
	stopProbes             context.CancelFunc
	pwg                    sync.WaitGroup
	nem                    *nm.Nemesis
	disk                   *slowdisk.Disk // the nodes' slow disk (mountSlowDisk), or nil
	tc                     time.Time      // start of collect and check
	serves                 *checker.Finding
	audit                  []fencekv.AuditRecord
	rounds                 [][]checker.NodeStatus
	converge               checker.Result
	raw, h                 []history.Record
	stats                  ResolveStats
}

// prepareRun checks and completes cfg (net mode, the nemeses the mode
// can realise, the lin workload's ttl), names the run and creates its
// results folder.
func prepareRun(cfg Config) (*run, error) {
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Nodes < 3 || cfg.Workers < 1 || cfg.Resources < 1 || cfg.TTL <= 2*cfg.SkewMargin {
		return nil, fmt.Errorf("bad config: need nodes >= 3, workers and resources >= 1, ttl > 2 × skew margin")
	}
	if cfg.NetMode == "" {
		cfg.NetMode = NetProxy
	}
	// Delay needs tc netem, which this kind of kernel lacks: in namespace
	// mode net-slow is left out (proxy mode delays in the proxy).
	var dropped []string
	if cfg.NetMode == NetNS {
		var kept []string
		for _, k := range cfg.Nemeses {
			if k == history.NemNetSlow {
				dropped = append(dropped, k)
				continue
			}
			kept = append(kept, k)
		}
		cfg.Nemeses = kept
	}
	if cfg.NetMode == NetDocker {
		var kept []string
		for _, k := range cfg.Nemeses {
			if slices.Contains(DockerNemeses, k) {
				kept = append(kept, k)
			} else {
				dropped = append(dropped, k)
			}
		}
		cfg.Nemeses = kept
		if cfg.Image == "" {
			cfg.Image = DefaultDockerImage
		}
		if len(cfg.Bugs) > 0 {
			return nil, errors.New("docker mode runs the image as built: planted bugs need a plantedbugs build (use proxy or netns mode)")
		}
	}
	cfg, edge := DriftEdgeFor(cfg) // clock-drift-edge: drift bound, max ttl, skew margin
	// The lin workload's leases outlive the run (the nodes' --max-ttl is
	// raised to allow it), up to runs of about two hours, and as far as
	// the skew margin covers the drift of such a lease (the nodes refuse
	// a --max-ttl above skew margin / drift: 50 minutes at 300ms, 1e-4).
	linTTL := min(cfg.Duration+cfg.Quiet+2*time.Minute, 2*time.Hour, time.Duration(float64(cfg.SkewMargin)/1e-4)-time.Minute)
	if cfg.Duration+cfg.Quiet+time.Minute > linTTL || cfg.LinResources == 0 {
		cfg.LinWorkers = 0 // leases would expire within the run: expiry is not in the model
	}
	r := &run{t0: time.Now(), durs: map[string]string{}, dropped: dropped, linTTL: linTTL, edge: edge}
	r.mode = "fenced"
	if cfg.Unfenced {
		r.mode = "unfenced"
	}
	for _, b := range cfg.Bugs {
		if _, err := FindPlantedBug(b); err != nil {
			return nil, err
		}
		r.mode += "-bug-" + b
	}
	r.dir = filepath.Join(cfg.ResultsDir, fmt.Sprintf("%s-seed%d-%s", r.t0.UTC().Format("20060102T150405"), cfg.Seed, r.mode))
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	r.cfg = cfg
	r.sum = &Summary{Dir: r.dir, Config: cfg, Started: r.t0.UTC().Format(time.RFC3339), Durations: r.durs}
	return r, nil
}

// phase records how long a phase took in the summary's durations.
func (r *run) phase(name string, since time.Time) {
	r.durs[name] = time.Since(since).Round(time.Millisecond).String()
}

// say prints a progress line, stamped with the time since the start.
func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Out, "[%6.1fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

// onExit registers f to run when Run returns, after those registered
// later.
func (r *run) onExit(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *run) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// binaries builds leased and fencedkv unless --bin-dir names them, and a
// plantedbugs build of this binary for the workers when they carry the
// client's planted bugs.
func (r *run) binaries(ctx context.Context) error {
	cfg := &r.cfg
	r.binDir = cfg.BinDir
	if r.binDir == "" {
		tb := time.Now()
		tmp, err := os.MkdirTemp("", "jepsen-bin-")
		if err != nil {
			return err
		}
		r.onExit(func() { os.RemoveAll(tmp) })
		if err := Build(ctx, tmp, cfg.Race, clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild, len(cfg.Bugs) > 0); err != nil {
			return err
		}
		r.binDir = tmp
		if clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild {
			cfg.Self = filepath.Join(tmp, "jepsen")
		}
		r.phase("build", tb)
	}
	if clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild {
		// The workers carry the client's planted bugs: they must be a
		// plantedbugs build of this binary.
		tmp, err := os.MkdirTemp("", "jepsen-worker-")
		if err != nil {
			return err
		}
		r.onExit(func() { os.RemoveAll(tmp) })
		if err := Build(ctx, tmp, cfg.Race, true, true); err != nil {
			return err
		}
		cfg.Self = filepath.Join(tmp, "jepsen")
	}
	if cfg.Self == "" {
		var err error
		if cfg.Self, err = os.Executable(); err != nil {
			return err
		}
	}
	return nil
}

// mountSlowDisk puts the run's logs dir, which holds the nodes' data dirs,
// on a slow disk (history.NemSlowDisk): the dir moves to .logs-disk and a
// FUSE loopback of it is mounted in its place. When Run returns, after the
// nodes and fencedkv have stopped, it is unmounted and moved back.
func (r *run) mountSlowDisk() error {
	if err := slowdisk.Available(); err != nil {
		return fmt.Errorf("%s: %w", history.NemSlowDisk, err)
	}
	logs, backing := filepath.Join(r.dir, "logs"), filepath.Join(r.dir, ".logs-disk")
	if err := os.Rename(logs, backing); err != nil {
		return err
	}
	if err := os.Mkdir(logs, 0o755); err != nil {
		return err
	}
	d, err := slowdisk.Mount(logs, backing)
	if err != nil {
		os.Remove(logs)
		os.Rename(backing, logs)
		return err
	}
	r.disk = d
	r.onExit(func() {
		if err := d.Unmount(); err != nil {
			r.say("slow disk: unmount %s: %v (the data is in %s)", logs, err, backing)
			return
		}
		if err := os.Remove(logs); err == nil {
			os.Rename(backing, logs)
		}
	})
	return nil
}

// startCluster starts the leased nodes (processes behind the net mode, or
// containers) and fencedkv.
func (r *run) startCluster(ctx context.Context) error {
	cfg := r.cfg
	ts := time.Now()
	extra := append([]string{"--min-ttl", "1s", "--max-ttl", max(r.linTTL+time.Minute, 10*time.Minute).String(),
		"--skew-margin", cfg.SkewMargin.String(), "--tick", "250ms"}, nm.SnapshotArgs(cfg.Nemeses)...)
	extra = append(extra, r.edge.NodeArgs()...)
	if UsesClock(cfg.Nemeses) {
		extra = append(extra, ClockArgs(filepath.Join(r.dir, "logs"))...)
	}
	if slices.Contains(cfg.Nemeses, history.NemSlowDisk) {
		if slices.Contains(cfg.Nemeses, history.NemStorage) {
			// It opens the nodes' raft.db with bbolt, which maps the
			// file, in the process that serves the mount: a FUSE
			// deadlock (go-fuse's fs/api.go, "Deadlocks").
			return fmt.Errorf("%s cannot run with %s", history.NemSlowDisk, history.NemStorage)
		}
		if err := r.mountSlowDisk(); err != nil {
			return err
		}
	}
	var err error
	if cfg.NetMode == NetDocker {
		r.cl, err = StartClusterDocker(ctx, cfg.Image, filepath.Join(r.dir, "logs"), cfg.Nodes, extra)
	} else {
		r.cl, err = StartClusterNet(ctx, filepath.Join(r.binDir, "leased"), filepath.Join(r.dir, "logs"), cfg.Nodes, extra,
			plantedEnv(cfg.Bugs, "leased"), cfg.NetMode, cfg.Seed)
	}
	if err != nil {
		return err
	}
	r.onExit(r.cl.Stop)
	r.kvProc, r.kvURL, err = StartKV(ctx, filepath.Join(r.binDir, "fencedkv"), filepath.Join(r.dir, "logs"), cfg.Unfenced, plantedEnv(cfg.Bugs, "fencedkv"))
	if err != nil {
		return err
	}
	kvProc := r.kvProc
	r.onExit(func() { kvProc.Kill(syscall.SIGKILL, 5*time.Second) })
	r.kv = &fencekv.Client{BaseURL: r.kvURL}
	r.phase("start", ts)
	r.say("%d leased nodes at %s (net %s), fencedkv (%s) at %s", cfg.Nodes, strings.Join(r.cl.Endpoints(), ","), cfg.NetMode, r.mode, r.kvURL)
	return nil
}

// openLogs creates history.jsonl and nemesis.jsonl.
func (r *run) openLogs(context.Context) error {
	hf, err := os.Create(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return err
	}
	r.onExit(func() { hf.Close() })
	r.hist = history.NewWriter(hf)
	nf, err := os.Create(filepath.Join(r.dir, "nemesis.jsonl"))
	if err != nil {
		return err
	}
	r.onExit(func() { nf.Close() })
	r.nlog = history.NewWriter(nf)
	r.onExit(func() { r.nlog.Flush() })
	return nil
}

// startWatcher starts the watcher of the replicated log's lease events and
// waits until its first stream is open.
func (r *run) startWatcher(ctx context.Context) error {
	wctx, stopWatch := context.WithCancel(ctx)
	r.stopWatch = stopWatch
	r.onExit(stopWatch)
	r.wt = &watcher{endpoints: r.cl.Endpoints(), prefix: WatchPrefix, hist: r.hist}
	ready := make(chan struct{})
	r.wwg.Add(1)
	go func() { defer r.wwg.Done(); r.wt.run(wctx, ready) }()
	r.onExit(r.wwg.Wait)
	r.onExit(stopWatch)
	select {
	case <-ready:
		return nil
	case <-time.After(15 * time.Second):
		return errors.New("the watcher could not start a stream within 15s")
	}
}

// startWorkers starts the fenced, linearizability and keep-alive worker
// processes.
func (r *run) startWorkers(context.Context) error {
	cfg := r.cfg
	for i := 0; i < cfg.Resources; i++ {
		r.resources = append(r.resources, fmt.Sprintf("%s%d", ResourcePrefix, i))
	}
	r.rng = rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973))
	for i := 0; i < cfg.Workers; i++ {
		wp := &workerProc{id: fmt.Sprintf("w%d", i+1), paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: wp.id, Bin: cfg.Self, Log: filepath.Join(r.dir, "logs", wp.id+".log"), Stdin: true,
			Args: []string{"worker", "--id", wp.id, "--endpoints", strings.Join(r.cl.Endpoints(), ","), "--kv", r.kvURL,
				"--resources", strings.Join(r.resources, ","), "--ttl", cfg.TTL.String(), "--skew-margin", cfg.SkewMargin.String(),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(r.rng.Uint64())},
			Env: plantedEnv(cfg.Bugs, "client"), Stdout: recordLines(r.hist, &r.badMu, &r.badLines, wp.paused)}
		wp.proc.Args = append(wp.proc.Args, r.edge.WorkerArgs()...)
		if err := wp.proc.Start(); err != nil {
			return err
		}
		r.workers = append(r.workers, wp)
	}
	r.fencedWorkers = r.workers
	var linResources []string
	for i := 0; i < cfg.LinResources; i++ {
		linResources = append(linResources, fmt.Sprintf("%s%d", checker.LinPrefix, i))
	}
	for i := 0; i < cfg.LinWorkers; i++ {
		id := fmt.Sprintf("l%d", i+1)
		wp := &workerProc{id: id, paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: id, Bin: cfg.Self, Log: filepath.Join(r.dir, "logs", id+".log"), Stdin: true,
			Args: []string{"worker", "--lin", "--id", id, "--endpoints", strings.Join(r.cl.Endpoints(), ","), "--kv", r.kvURL,
				"--resources", strings.Join(linResources, ","), "--ttl", r.linTTL.String(),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(r.rng.Uint64())},
			Stdout: recordLines(r.hist, &r.badMu, &r.badLines, nil)}
		if err := wp.proc.Start(); err != nil {
			return err
		}
		r.workers = append(r.workers, wp)
	}
	for i := 0; i < cfg.KeepAliveWorkers; i++ {
		r.kaResources = append(r.kaResources, fmt.Sprintf("%s%d", KeepAlivePrefix, i))
	}
	for i := 0; i < cfg.KeepAliveWorkers; i++ {
		id := fmt.Sprintf("k%d", i+1)
		wp := &workerProc{id: id, paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: id, Bin: cfg.Self, Log: filepath.Join(r.dir, "logs", id+".log"), Stdin: true,
			Args: []string{"worker", "--keepalive", "--id", id, "--endpoints", strings.Join(r.cl.Endpoints(), ","), "--kv", r.kvURL,
				"--resources", strings.Join(r.kaResources, ","),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(r.rng.Uint64())},
			Env: plantedEnv(cfg.Bugs, "client"), Stdout: recordLines(r.hist, &r.badMu, &r.badLines, nil)}
		if err := wp.proc.Start(); err != nil {
			return err
		}
		r.workers = append(r.workers, wp)
	}
	r.onExit(r.stopWorkers)
	r.say("%d workers on %d resources, ttl %v; %d linearizability workers on %d resources, ttl %v",
		cfg.Workers, cfg.Resources, cfg.TTL, cfg.LinWorkers, cfg.LinResources, r.linTTL)
	return nil
}

// stopWorkers asks every worker to stop (resuming a paused one first) and
// kills those still running after 30 s.
func (r *run) stopWorkers() {
	for _, w := range r.workers {
		_ = w.proc.Signal(syscall.SIGCONT)
		_ = w.proc.Send(CmdStop)
	}
	deadline := time.After(30 * time.Second)
	for _, w := range r.workers {
		select {
		case <-w.proc.Exited():
		case <-deadline:
		}
		w.proc.Kill(syscall.SIGKILL, 5*time.Second)
	}
}

// startProbes starts the availability probers, one pinned to each node
// (availability.go).
func (r *run) startProbes(ctx context.Context) error {
	af, err := os.Create(filepath.Join(r.dir, "availability.jsonl"))
	if err != nil {
		return err
	}
	r.onExit(func() { af.Close() })
	r.alog = history.NewWriter(af)
	r.onExit(func() { r.alog.Flush() })
	pctx, stopProbes := context.WithCancel(ctx)
	r.stopProbes = stopProbes
	r.pwg.Add(1)
	go func() { defer r.pwg.Done(); probeAvailability(pctx, r.cl.Nodes(), r.cl.Endpoints(), r.alog) }()
	r.onExit(r.pwg.Wait)
	r.onExit(stopProbes)
	return nil
}

// workload runs the nemesis for the run's duration, heals, holds the
// quiet phase and stops the probers and the workers.
func (r *run) workload(ctx context.Context) error {
	cfg := r.cfg
	tw := time.Now()
	nc := nm.Config{Kinds: cfg.Nemeses, Rng: r.rng, Nodes: r.cl, Net: r.cl.Net(), Workers: asWorkers(r.fencedWorkers), KV: r.kv, TTL: cfg.TTL,
		ResourcePrefix: ResourcePrefix, Log: r.nlog, Hist: r.hist, OnRestore: r.wt.clusterReplaced, Progress: func(s string) { r.say("%s", s) }}
	if UsesClock(cfg.Nemeses) {
		nc.Clocks = fileClocks{c: r.cl, dir: filepath.Join(r.dir, "logs")}
	}
	if r.disk != nil {
		nc.Disk = r.disk
	}
	r.nem = nm.New(nc)
	nctx, stopNem := context.WithTimeout(ctx, cfg.Duration)
	progressDone := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
				c, _ := r.nem.Counts()
				r.say("progress: %d history records, %d lease events, faults %v", r.hist.Len(), r.wt.events, c)
			}
		}
	}()
	r.nem.Run(nctx)
	stopNem()
	if ctx.Err() != nil {
		close(progressDone)
		return ctx.Err()
	}
	r.say("faults healed; quiet phase %v", cfg.Quiet)
	sleepCtx(ctx, cfg.Quiet)
	close(progressDone)
	r.stopProbes()
	r.pwg.Wait()
	r.stopWorkers()
	r.phase("workload", tw)
	r.say("workers stopped")
	return nil
}

// collect gathers what the checkers read: the sentinel acquire (the
// cluster serves after healing), final reads, fencedkv's audit, replica
// convergence, and the nodes' Raft logs, which decide the acquires whose
// outcome the clients never learnt (resolved.jsonl; history.jsonl stays
// raw).
func (r *run) collect(ctx context.Context) error {
	cfg := r.cfg
	r.tc = time.Now()
	r.serves = checker.NewFinding("serves-after-heal")
	if err := sentinel(ctx, r.cl.Endpoints(), r.wt); err != nil {
		r.serves.Invalid("unavailable-after-heal", "%v", err)
	} else {
		r.serves.R.Checked = 1
	}

	r.finalReads(ctx)
	r.stopWatch()
	r.wwg.Wait()
	if err := r.hist.Flush(); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	audit, err := r.kv.AuditAll(actx)
	cancel()
	if err != nil {
		return fmt.Errorf("reading fencedkv's audit: %w", err)
	}
	r.audit = audit
	writeJSON(filepath.Join(r.dir, "audit.json"), audit)

	// Replicas converge: every node reaches one state index with one state
	// hash (bounded by 20 s).
	r.rounds, r.converge = PollConvergence(ctx, r.cl, 20*time.Second)
	writeJSON(filepath.Join(r.dir, "convergence.json"), r.rounds)
	r.say("%s", r.converge)

	r.raw, err = history.ReadHistoryFile(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return err
	}
	applied := map[string]uint64{}
	for _, round := range r.rounds {
		for _, s := range round {
			if s.Err == "" && s.AppliedIndex > applied[s.Node] {
				applied[s.Node] = s.AppliedIndex
			}
		}
	}
	r.cl.Stop()
	logs, dumpErrs := DumpLogs(ctx, filepath.Join(r.binDir, "leased"), filepath.Join(r.dir, "logs"), r.cl.Nodes(), applied)
	r.sum.DumpErrors = dumpErrs
	r.h, r.stats = Resolve(r.raw, logs, cfg.Nodes, history.Now()-time.Now().UnixNano())
	r.sum.Resolution = &r.stats
	if err := writeHistory(filepath.Join(r.dir, "resolved.jsonl"), r.h); err != nil {
		return err
	}
	stats := r.stats
	r.say("unknown acquires resolved from %d raft logs: %d of %d (ok %d, not applied %d); still unknown %d; other unknown ops (not resolvable) %d",
		stats.Logs, stats.Resolved(), stats.Unknown, stats.ResolvedOK, stats.ResolvedNotApplied, stats.StillUnknown, stats.UnknownOther)
	r.say("acknowledged acquires in the raft logs: %d found alike, %d with another lease or token, %d not found %s",
		stats.AckedInLogs, stats.AckedMismatch, stats.AckedNotInLogs, stats.AckedMismatchExample)
	return nil
}

// finalReads reads every fenced and keep-alive resource from fencedkv
// once, into the history.
func (r *run) finalReads(ctx context.Context) {
	for _, res := range append(r.resources, r.kaResources...) {
		inv := history.Record{Kind: history.Invoke, Worker: "final", Op: "final-" + res, Type: history.OpRead, Resource: res, TimeNs: history.Now()}
		_ = r.hist.Write(inv)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, _, err := r.kv.Get(rctx, res)
		cancel()
		done := inv
		done.Kind, done.TimeNs = history.Complete, history.Now()
		switch {
		case err == nil || errors.Is(err, fencekv.ErrNotFound):
			done.Result, done.Value = history.OK, string(v)
		default:
			done.Result, done.Error = history.Unknown, err.Error()
		}
		_ = r.hist.Write(done)
	}
}

// check runs the checkers over the resolved history, tallies them and
// writes report.html.
func (r *run) check(context.Context) error {
	cfg, sum, h := r.cfg, r.sum, r.h
	sum.Ops = countOps(r.raw)
	sum.Faults, sum.FaultsEffective = r.nem.Counts()
	faults, _ := history.ReadFaults(mustRead(filepath.Join(r.dir, "nemesis.jsonl"), r.nlog))
	samples, _ := history.ReadProbeSamples(mustRead(filepath.Join(r.dir, "availability.jsonl"), r.alog))
	unavail, windows := checker.CheckUnavailabilityBounded(samples, faults, checker.UnavailabilityBound)
	r.say("client-observed unavailability during faults that leave a quorum up (callers pinned to one node): %s", checker.WindowsString(windows))
	sum.Results = append(checker.WithRestoreCheck(cfg.Nemeses, checker.CheckAll(h, r.audit, cfg.SkewMargin), h, faults), r.serves.Done("sentinel"), r.converge,
		CheckMeaningful(cfg, h, faults), unavail, checker.CheckNoPanics(readLogs(filepath.Join(r.dir, "logs"))))
	if slices.Contains(cfg.Nemeses, history.NemStorage) {
		sum.Results = append(sum.Results, checker.CheckStorageRefused(faults))
	}
	if slices.Contains(cfg.Nemeses, history.NemLostVoter) {
		sum.Results = append(sum.Results, checker.CheckLostVoterRefused(faults))
	}
	if cfg.KeepAliveWorkers > 0 {
		r.say("keep-alive workload: %s", checker.KeepAliveSummary(h, faults))
		sum.Results = append(sum.Results, checker.CheckRenewalsBounded(h, faults), checker.CheckKeepAliveKept(h, faults))
	}
	if slices.Contains(cfg.Nemeses, history.NemMemberUnreachable) {
		sum.Results = append(sum.Results, checker.CheckMembershipKeepsQuorum(samples, faults, checker.UnavailabilityBound))
	}
	checker.MarkRequired(cfg.Nemeses, sum.Results)
	sum.Passed, sum.Failed = checker.Tally(sum.Results)
	sum.NotCounted = checker.NotCounted(sum.Results)
	sum.WatchEvents = r.wt.events
	if err := report.WriteReport(filepath.Join(r.dir, "report.html"), sum.reportRun(), h, faults); err != nil {
		r.say("report.html: %v", err)
	}
	r.phase("check", r.tc)
	if r.badLines > 0 {
		return fmt.Errorf("%d unreadable record lines from workers", r.badLines)
	}
	return nil
}

// print writes the closing lines: operations, faults, lease events,
// resolution, each checker's result and the tally.
func (r *run) print() {
	out, sum, stats := r.cfg.Out, r.sum, r.stats
	fmt.Fprintf(out, "\nops:")
	for _, t := range []string{history.OpAcquire, history.OpWrite, history.OpRenew, history.OpRelease, history.OpRead} {
		fmt.Fprintf(out, " %s %v;", t, sum.Ops[t])
	}
	fmt.Fprintf(out, "\nfaults: ")
	for _, k := range slices.Sorted(maps.Keys(sum.Faults)) {
		fmt.Fprintf(out, "%s %d (effective %d)  ", k, sum.Faults[k], sum.FaultsEffective[k])
	}
	fmt.Fprintf(out, "\nlease events watched: %d\nunknown acquires resolved from the raft logs: %d of %d (ok %d, not applied %d, still unknown %d)\n\n",
		r.wt.events, stats.Resolved(), stats.Unknown, stats.ResolvedOK, stats.ResolvedNotApplied, stats.StillUnknown)
	for _, res := range sum.Results {
		fmt.Fprintln(out, res)
	}
	fmt.Fprintf(out, "\n%d passed, %d failed%s  (%s run, %s)\n", sum.Passed, sum.Failed, report.NotCountedNote(sum.NotCounted), r.mode, r.dir)
}

// dropDataDirs removes the nodes' and fencedkv's data after a run where
// everything passed (a not-required result too); the logs stay. The data
// dirs only matter when something failed.
func (r *run) dropDataDirs() {
	r.cl.Stop()
	r.kvProc.Kill(syscall.SIGKILL, 5*time.Second)
	for _, id := range r.cl.Nodes() {
		os.RemoveAll(filepath.Join(r.dir, "logs", id))
	}
	lost, _ := filepath.Glob(filepath.Join(r.dir, "logs", "lost-*")) // data dirs a restore moved aside
	for _, d := range lost {
		os.RemoveAll(d)
	}
	os.Remove(filepath.Join(r.dir, "logs", "kv.db"))
}

// recordLines handles a worker's stdout: records into the history, pause
// notices to paused.
func recordLines(hist *history.Writer, mu *sync.Mutex, bad *int, paused chan PauseNotice) func(string) {
	return func(line string) {
		switch {
		case strings.HasPrefix(line, RecordPrefix):
			var r history.Record
			if json.Unmarshal([]byte(line[len(RecordPrefix):]), &r) != nil {
				mu.Lock()
				*bad++
				mu.Unlock()
				return
			}
			_ = hist.Write(r)
		case strings.HasPrefix(line, PausingPrefix) && paused != nil:
			var n PauseNotice
			if json.Unmarshal([]byte(line[len(PausingPrefix):]), &n) == nil {
				select {
				case paused <- n:
				default:
				}
			}
		}
	}
}

// sentinel acquires and releases a sentinel resource, then waits until the
// watcher has seen that release: every event before it has been recorded.
func sentinel(ctx context.Context, endpoints []string, wt *watcher) error {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		return err
	}
	defer c.Close()
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := c.Acquire(actx, ResourcePrefix+"~sentinel", client.WithTTL(2*time.Second), client.WithHolder("harness"))
	if err != nil {
		return fmt.Errorf("the cluster did not grant a lease within 20s after healing: %w", err)
	}
	if err := l.Release(actx); err != nil {
		return fmt.Errorf("releasing the sentinel: %w", err)
	}
	id := l.ID().String()
	for i := 0; i < 300; i++ {
		if wt.sawRelease(id) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = wt.hist.Write(history.Record{Kind: history.Observe, Worker: "watch", Op: "gap-catch-up", Type: history.OpWatchGap, TimeNs: history.Now(), Error: "the watcher did not see the sentinel's release within 15s"})
	return nil
}

// readLogs reads every process log of a run (logs/*.log), by file name;
// one that cannot be read is left out.
func readLogs(dir string) map[string][]byte {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	logs := map[string][]byte{}
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			logs[filepath.Base(p)] = b
		}
	}
	return logs
}

func mustRead(path string, flush *history.Writer) []byte {
	_ = flush.Flush()
	b, _ := os.ReadFile(path)
	return b
}

// CheckMeaningful says whether the run could have found anything: enough
// operations before the first fault, every enabled nemesis injected and
// seen to take effect at least once, acknowledged fenced writes, and
// linearizability operations when that workload ran. A run that is not
// meaningful is unknown, not invalid: it says nothing about the system.
func CheckMeaningful(cfg Config, h []history.Record, faults []history.Fault) checker.Result {
	f := checker.NewFinding("run-meaningful")
	first := int64(0)
	started, effective := map[string]int{}, map[string]int{}
	for _, x := range faults {
		if x.Phase == "start" {
			started[x.Kind]++
			if first == 0 {
				first = x.TimeNs
			}
		}
		if x.Phase == "heal" && x.Effective {
			effective[x.Kind]++
		}
	}
	before, writes, lin := 0, 0, 0
	for _, r := range h {
		if r.Kind != history.Complete || r.Result != history.OK || r.ResolvedFrom != "" {
			continue // resolved afterwards: never acknowledged to the client
		}
		if first == 0 || r.TimeNs < first {
			before++
		}
		switch {
		case r.Type == history.OpWrite:
			writes++
		case strings.HasPrefix(r.Resource, checker.LinPrefix):
			lin++
		}
	}
	f.R.Checked = before + writes + lin
	for _, k := range cfg.Nemeses {
		if started[k] == 0 || effective[k] == 0 {
			f.Unknown("nemesis %s injected %d times, effective %d times", k, started[k], effective[k])
		}
	}
	switch {
	case len(cfg.Nemeses) > 0 && before < 10:
		f.Unknown("only %d operations completed before the first fault", before)
	case writes == 0:
		f.Unknown("no fenced write was acknowledged")
	case cfg.LinWorkers > 0 && lin == 0:
		f.Unknown("no operation of the linearizability workload completed")
	}
	return f.Done("operation")
}

func countOps(h []history.Record) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, r := range h {
		if r.Kind != history.Complete {
			continue
		}
		if out[r.Type] == nil {
			out[r.Type] = map[string]int{}
		}
		out[r.Type][r.Result]++
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Recheck runs the history checkers again over a stored results folder
// (config.json, resolved.jsonl or else history.jsonl, audit.json) and prints them. serves-after-heal
// is a live observation and is not re-derived. It also writes the plots,
// linearizability.html and report.html again (RegenerateArtifacts).
func Recheck(dir string, out io.Writer) ([]checker.Result, error) {
	var cfg Config
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	// The resolved history when the run wrote one.
	h, err := history.ReadHistoryFile(filepath.Join(dir, "resolved.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		h, err = history.ReadHistoryFile(filepath.Join(dir, "history.jsonl"))
	}
	if err != nil {
		return nil, err
	}
	var audit []fencekv.AuditRecord
	if b, err = os.ReadFile(filepath.Join(dir, "audit.json")); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &audit); err != nil {
		return nil, fmt.Errorf("audit.json: %w", err)
	}
	rs := append(checker.CheckAll(h, audit, cfg.SkewMargin), checker.CheckNoPanics(readLogs(filepath.Join(dir, "logs"))))
	if nf, err := os.ReadFile(filepath.Join(dir, "nemesis.jsonl")); err == nil {
		faults, _ := history.ReadFaults(nf)
		rs = checker.WithRestoreCheck(cfg.Nemeses, rs, h, faults)
		if cfg.KeepAliveWorkers > 0 {
			rs = append(rs, checker.CheckRenewalsBounded(h, faults), checker.CheckKeepAliveKept(h, faults))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "availability.jsonl")); err == nil {
			samples, _ := history.ReadProbeSamples(b)
			r, _ := checker.CheckUnavailabilityBounded(samples, faults, checker.UnavailabilityBound)
			rs = append(rs, r)
			if slices.Contains(cfg.Nemeses, history.NemMemberUnreachable) {
				rs = append(rs, checker.CheckMembershipKeepsQuorum(samples, faults, checker.UnavailabilityBound))
			}
		}
	}
	checker.MarkRequired(cfg.Nemeses, rs)
	for _, r := range rs {
		fmt.Fprintln(out, r)
	}
	if err := RegenerateArtifacts(dir, h); err != nil {
		fmt.Fprintf(out, "\nartifacts: %v\n", err)
	}
	p, f := checker.Tally(rs)
	fmt.Fprintf(out, "\n%d passed, %d failed%s  (re-check of %s)\n", p, f, report.NotCountedNote(checker.NotCounted(rs)), dir)
	return rs, nil
}

// DumpLogs runs `leased dump-log` on each stopped node's data dir
// (logsDir/<id>), keeps its output as logsDir/<id>.raftlog.jsonl and reads
// it; applied is the highest index each node reported applied. A node
// whose log cannot be read is left out and named in the returned errors
// (resolution then has fewer logs to go on, never more certainty).
func DumpLogs(ctx context.Context, leased, logsDir string, nodes []string, applied map[string]uint64) ([]*NodeLog, []string) {
	var out []*NodeLog
	var errs []string
	for _, id := range nodes {
		path := filepath.Join(logsDir, id+".raftlog.jsonl")
		n, err := dumpOne(ctx, leased, filepath.Join(logsDir, id), path, id)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		n.Applied = applied[id]
		out = append(out, n)
	}
	return out, errs
}

func dumpOne(ctx context.Context, leased, dataDir, path, id string) (*NodeLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(dctx, leased, "dump-log", "--data-dir", dataDir)
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return ReadLogDump(id, f)
}

func writeHistory(path string, h []history.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := history.NewWriter(f)
	for _, r := range h {
		if err := w.Write(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
