package jepsen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		TTL: 2 * time.Second, SkewMargin: 300 * time.Millisecond, Seed: 1, Nemeses: InSpecNemeses(), NetMode: NetProxy,
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
	Results      []Result          `json:"results"`
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
		if r.Verdict == Invalid && r.Required() {
			return true
		}
	}
	return false
}

// AllValid reports whether every checker passed.
func (s *Summary) AllValid() bool { return len(s.Results) > 0 && s.Failed == 0 }

type workerProc struct {
	id     string
	proc   *Proc
	paused chan PauseNotice
}

// ResourcePrefix starts every resource the fenced workers lease; the
// watcher follows WatchPrefix, which covers them, LinPrefix and the
// sentinel.
const (
	ResourcePrefix = "jr/"
	WatchPrefix    = "j"
)

// Run runs one test: build, start, workload and nemesis, quiet phase,
// final reads, checkers, results folder. An error is a harness failure;
// the checkers' verdicts are in the Summary.
func Run(ctx context.Context, cfg Config) (sum *Summary, err error) {
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
			if k == NemNetSlow {
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
	t0 := time.Now()
	durs := map[string]string{}
	phase := func(name string, since time.Time) { durs[name] = time.Since(since).Round(time.Millisecond).String() }
	mode := "fenced"
	if cfg.Unfenced {
		mode = "unfenced"
	}
	for _, b := range cfg.Bugs {
		if _, err := FindPlantedBug(b); err != nil {
			return nil, err
		}
		mode += "-bug-" + b
	}
	dir := filepath.Join(cfg.ResultsDir, fmt.Sprintf("%s-seed%d-%s", t0.UTC().Format("20060102T150405"), cfg.Seed, mode))
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	sum = &Summary{Dir: dir, Config: cfg, Started: t0.UTC().Format(time.RFC3339), Durations: durs}
	defer func() {
		if err != nil {
			sum.HarnessError = err.Error()
		}
		phase("total", t0)
		writeJSON(filepath.Join(dir, "summary.json"), sum)
	}()
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return sum, err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(cfg.Out, "[%6.1fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	say("run %s, seed %d, %s, results in %s", mode, cfg.Seed, strings.Join(cfg.Nemeses, ","), dir)
	if edge != nil {
		say("clock-drift-edge: drift %g, max ttl %v, skew margin %v; fenced workers' client margin %v, client clocks at %g×; no lin or keep-alive workers",
			edge.Drift, edge.MaxTTL, edge.SkewMargin, edge.ClientMargin, edge.ClientClockRate)
	}
	if len(dropped) > 0 {
		say("left out in %s mode, which cannot realise them (see Network faults in jepsen/README.md): %s", cfg.NetMode, strings.Join(dropped, ","))
	}

	// Binaries.
	binDir := cfg.BinDir
	if binDir == "" {
		tb := time.Now()
		tmp, err := os.MkdirTemp("", "jepsen-bin-")
		if err != nil {
			return sum, err
		}
		defer os.RemoveAll(tmp)
		if err := Build(ctx, tmp, cfg.Race, clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild, len(cfg.Bugs) > 0); err != nil {
			return sum, err
		}
		binDir = tmp
		if clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild {
			cfg.Self = filepath.Join(tmp, "jepsen")
		}
		phase("build", tb)
	}
	if clientBugs(cfg.Bugs) && cfg.Self == "" && !PlantedBuild {
		// The workers carry the client's planted bugs: they must be a
		// plantedbugs build of this binary.
		tmp, err := os.MkdirTemp("", "jepsen-worker-")
		if err != nil {
			return sum, err
		}
		defer os.RemoveAll(tmp)
		if err := Build(ctx, tmp, cfg.Race, true, true); err != nil {
			return sum, err
		}
		cfg.Self = filepath.Join(tmp, "jepsen")
	}
	if cfg.Self == "" {
		if cfg.Self, err = os.Executable(); err != nil {
			return sum, err
		}
	}

	// Cluster and resource.
	ts := time.Now()
	extra := append([]string{"--min-ttl", "1s", "--max-ttl", max(linTTL+time.Minute, 10*time.Minute).String(),
		"--skew-margin", cfg.SkewMargin.String(), "--tick", "250ms"}, SnapshotArgs...)
	extra = append(extra, edge.NodeArgs()...)
	if UsesClock(cfg.Nemeses) {
		extra = append(extra, ClockArgs(filepath.Join(dir, "logs"))...)
	}
	var cl *Cluster
	if cfg.NetMode == NetDocker {
		cl, err = StartClusterDocker(ctx, cfg.Image, filepath.Join(dir, "logs"), cfg.Nodes, extra)
	} else {
		cl, err = StartClusterNet(ctx, filepath.Join(binDir, "leased"), filepath.Join(dir, "logs"), cfg.Nodes, extra,
			plantedEnv(cfg.Bugs, "leased"), cfg.NetMode, cfg.Seed)
	}
	if err != nil {
		return sum, err
	}
	defer cl.Stop()
	kvProc, kvURL, err := StartKV(ctx, filepath.Join(binDir, "fencedkv"), filepath.Join(dir, "logs"), cfg.Unfenced, plantedEnv(cfg.Bugs, "fencedkv"))
	if err != nil {
		return sum, err
	}
	defer kvProc.Kill(syscall.SIGKILL, 5*time.Second)
	kv := &fencekv.Client{BaseURL: kvURL}
	phase("start", ts)
	say("%d leased nodes at %s (net %s), fencedkv (%s) at %s", cfg.Nodes, strings.Join(cl.Endpoints(), ","), cfg.NetMode, mode, kvURL)

	// History and nemesis log.
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return sum, err
	}
	defer hf.Close()
	hist := NewWriter(hf)
	nf, err := os.Create(filepath.Join(dir, "nemesis.jsonl"))
	if err != nil {
		return sum, err
	}
	defer nf.Close()
	nlog := NewWriter(nf)
	defer nlog.Flush()

	// Watcher.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wt := &watcher{endpoints: cl.Endpoints(), prefix: WatchPrefix, hist: hist}
	ready := make(chan struct{})
	var wwg sync.WaitGroup
	wwg.Add(1)
	go func() { defer wwg.Done(); wt.run(wctx, ready) }()
	defer wwg.Wait()
	defer stopWatch()
	select {
	case <-ready:
	case <-time.After(15 * time.Second):
		return sum, errors.New("the watcher could not start a stream within 15s")
	}

	// Workers.
	var resources []string
	for i := 0; i < cfg.Resources; i++ {
		resources = append(resources, fmt.Sprintf("%s%d", ResourcePrefix, i))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973))
	var workers []*workerProc
	badLines := 0
	var badMu sync.Mutex
	for i := 0; i < cfg.Workers; i++ {
		wp := &workerProc{id: fmt.Sprintf("w%d", i+1), paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: wp.id, Bin: cfg.Self, Log: filepath.Join(dir, "logs", wp.id+".log"), Stdin: true,
			Args: []string{"worker", "--id", wp.id, "--endpoints", strings.Join(cl.Endpoints(), ","), "--kv", kvURL,
				"--resources", strings.Join(resources, ","), "--ttl", cfg.TTL.String(), "--skew-margin", cfg.SkewMargin.String(),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(rng.Uint64())},
			Env: plantedEnv(cfg.Bugs, "client"), Stdout: recordLines(hist, &badMu, &badLines, wp.paused)}
		wp.proc.Args = append(wp.proc.Args, edge.WorkerArgs()...)
		if err := wp.proc.Start(); err != nil {
			return sum, err
		}
		workers = append(workers, wp)
	}
	fencedWorkers := workers
	var linResources []string
	for i := 0; i < cfg.LinResources; i++ {
		linResources = append(linResources, fmt.Sprintf("%s%d", LinPrefix, i))
	}
	for i := 0; i < cfg.LinWorkers; i++ {
		id := fmt.Sprintf("l%d", i+1)
		wp := &workerProc{id: id, paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: id, Bin: cfg.Self, Log: filepath.Join(dir, "logs", id+".log"), Stdin: true,
			Args: []string{"worker", "--lin", "--id", id, "--endpoints", strings.Join(cl.Endpoints(), ","), "--kv", kvURL,
				"--resources", strings.Join(linResources, ","), "--ttl", linTTL.String(),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(rng.Uint64())},
			Stdout: recordLines(hist, &badMu, &badLines, nil)}
		if err := wp.proc.Start(); err != nil {
			return sum, err
		}
		workers = append(workers, wp)
	}
	var kaResources []string
	for i := 0; i < cfg.KeepAliveWorkers; i++ {
		kaResources = append(kaResources, fmt.Sprintf("%s%d", KeepAlivePrefix, i))
	}
	for i := 0; i < cfg.KeepAliveWorkers; i++ {
		id := fmt.Sprintf("k%d", i+1)
		wp := &workerProc{id: id, paused: make(chan PauseNotice, 1)}
		wp.proc = &Proc{Name: id, Bin: cfg.Self, Log: filepath.Join(dir, "logs", id+".log"), Stdin: true,
			Args: []string{"worker", "--keepalive", "--id", id, "--endpoints", strings.Join(cl.Endpoints(), ","), "--kv", kvURL,
				"--resources", strings.Join(kaResources, ","),
				"--duration", (cfg.Duration + cfg.Quiet + time.Minute).String(), "--seed", fmt.Sprint(rng.Uint64())},
			Env: plantedEnv(cfg.Bugs, "client"), Stdout: recordLines(hist, &badMu, &badLines, nil)}
		if err := wp.proc.Start(); err != nil {
			return sum, err
		}
		workers = append(workers, wp)
	}
	stopWorkers := func() {
		for _, w := range workers {
			_ = w.proc.Signal(syscall.SIGCONT)
			_ = w.proc.Send(CmdStop)
		}
		deadline := time.After(30 * time.Second)
		for _, w := range workers {
			select {
			case <-w.proc.Exited():
			case <-deadline:
			}
			w.proc.Kill(syscall.SIGKILL, 5*time.Second)
		}
	}
	defer stopWorkers()
	say("%d workers on %d resources, ttl %v; %d linearizability workers on %d resources, ttl %v",
		cfg.Workers, cfg.Resources, cfg.TTL, cfg.LinWorkers, cfg.LinResources, linTTL)

	// Availability probers, one pinned to each node (availability.go).
	af, err := os.Create(filepath.Join(dir, "availability.jsonl"))
	if err != nil {
		return sum, err
	}
	defer af.Close()
	alog := NewWriter(af)
	defer alog.Flush()
	pctx, stopProbes := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); probeAvailability(pctx, cl.Nodes(), cl.Endpoints(), alog) }()
	defer pwg.Wait()
	defer stopProbes()

	// Nemesis, then the quiet phase.
	tw := time.Now()
	nem := &nemesis{kinds: append([]string(nil), cfg.Nemeses...), rng: rng, nodes: cl, net: cl.Net(), workers: fencedWorkers, kv: kv, ttl: cfg.TTL, log: nlog, hist: hist,
		counts: map[string]int{}, effect: map[string]int{}, progress: func(s string) { say("%s", s) }}
	if UsesClock(cfg.Nemeses) {
		nem.clocks = fileClocks{c: cl, dir: filepath.Join(dir, "logs")}
	}
	nem.onRestore = wt.clusterReplaced
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
				c, _ := nem.Counts()
				say("progress: %d history records, %d lease events, faults %v", hist.Len(), wt.events, c)
			}
		}
	}()
	nem.run(nctx)
	stopNem()
	if ctx.Err() != nil {
		close(progressDone)
		return sum, ctx.Err()
	}
	say("faults healed; quiet phase %v", cfg.Quiet)
	sleepCtx(ctx, cfg.Quiet)
	close(progressDone)
	stopProbes()
	pwg.Wait()
	stopWorkers()
	phase("workload", tw)
	say("workers stopped")

	// The cluster serves after healing; the watcher catches up to it.
	tc := time.Now()
	serves := newFinding("serves-after-heal")
	if err := sentinel(ctx, cl.Endpoints(), wt); err != nil {
		serves.invalid("unavailable-after-heal", "%v", err)
	} else {
		serves.r.Checked = 1
	}

	// Final reads.
	for _, res := range append(resources, kaResources...) {
		inv := Record{Kind: Invoke, Worker: "final", Op: "final-" + res, Type: OpRead, Resource: res, TimeNs: Now()}
		_ = hist.Write(inv)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, _, err := kv.Get(rctx, res)
		cancel()
		done := inv
		done.Kind, done.TimeNs = Complete, Now()
		switch {
		case err == nil || errors.Is(err, fencekv.ErrNotFound):
			done.Result, done.Value = OK, string(v)
		default:
			done.Result, done.Error = Unknown, err.Error()
		}
		_ = hist.Write(done)
	}
	stopWatch()
	wwg.Wait()
	if err := hist.Flush(); err != nil {
		return sum, err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	audit, err := kv.AuditAll(actx)
	cancel()
	if err != nil {
		return sum, fmt.Errorf("reading fencedkv's audit: %w", err)
	}
	writeJSON(filepath.Join(dir, "audit.json"), audit)

	// Replicas converge: every node reaches one state index with one state
	// hash (bounded by 20 s).
	rounds, converge := PollConvergence(ctx, cl, 20*time.Second)
	writeJSON(filepath.Join(dir, "convergence.json"), rounds)
	say("%s", converge)

	// The nodes stop; their Raft logs decide the acquires whose outcome
	// the clients never learnt (resolved.jsonl; history.jsonl stays raw).
	raw, err := ReadHistoryFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return sum, err
	}
	applied := map[string]uint64{}
	for _, round := range rounds {
		for _, s := range round {
			if s.Err == "" && s.AppliedIndex > applied[s.Node] {
				applied[s.Node] = s.AppliedIndex
			}
		}
	}
	cl.Stop()
	logs, dumpErrs := DumpLogs(ctx, filepath.Join(binDir, "leased"), filepath.Join(dir, "logs"), cl.Nodes(), applied)
	sum.DumpErrors = dumpErrs
	h, stats := Resolve(raw, logs, cfg.Nodes, Now()-time.Now().UnixNano())
	sum.Resolution = &stats
	if err := writeHistory(filepath.Join(dir, "resolved.jsonl"), h); err != nil {
		return sum, err
	}
	say("unknown acquires resolved from %d raft logs: %d of %d (ok %d, not applied %d); still unknown %d; other unknown ops (not resolvable) %d",
		stats.Logs, stats.Resolved(), stats.Unknown, stats.ResolvedOK, stats.ResolvedNotApplied, stats.StillUnknown, stats.UnknownOther)
	say("acknowledged acquires in the raft logs: %d found alike, %d with another lease or token, %d not found %s",
		stats.AckedInLogs, stats.AckedMismatch, stats.AckedNotInLogs, stats.AckedMismatchExample)

	// Checkers, over the resolved history.
	sum.Ops = countOps(raw)
	sum.Faults, sum.FaultsEffective = nem.Counts()
	faults, _ := ReadFaults(mustRead(filepath.Join(dir, "nemesis.jsonl"), nlog))
	samples, _ := ReadProbeSamples(mustRead(filepath.Join(dir, "availability.jsonl"), alog))
	unavail, windows := CheckUnavailabilityBounded(samples, faults, UnavailabilityBound)
	say("client-observed unavailability during faults that leave a quorum up (callers pinned to one node): %s", windowsString(windows))
	sum.Results = append(withRestoreCheck(cfg.Nemeses, CheckAll(h, audit, cfg.SkewMargin), h, faults), serves.done("sentinel"), converge,
		CheckMeaningful(cfg, h, faults), unavail)
	if slices.Contains(cfg.Nemeses, NemStorage) {
		sum.Results = append(sum.Results, CheckStorageRefused(faults))
	}
	if cfg.KeepAliveWorkers > 0 {
		say("keep-alive workload: %s", KeepAliveSummary(h, faults))
		sum.Results = append(sum.Results, CheckRenewalsBounded(h, faults))
	}
	if slices.Contains(cfg.Nemeses, NemMemberUnreachable) {
		sum.Results = append(sum.Results, CheckMembershipKeepsQuorum(samples, faults, UnavailabilityBound))
	}
	MarkRequired(cfg.Nemeses, sum.Results)
	sum.Passed, sum.Failed = Tally(sum.Results)
	sum.NotCounted = NotCounted(sum.Results)
	sum.WatchEvents = wt.events
	if err := WriteReport(filepath.Join(dir, "report.html"), sum, h, faults); err != nil {
		say("report.html: %v", err)
	}
	phase("check", tc)
	if badLines > 0 {
		return sum, fmt.Errorf("%d unreadable record lines from workers", badLines)
	}

	fmt.Fprintf(cfg.Out, "\nops:")
	for _, t := range []string{OpAcquire, OpWrite, OpRenew, OpRelease, OpRead} {
		fmt.Fprintf(cfg.Out, " %s %v;", t, sum.Ops[t])
	}
	fmt.Fprintf(cfg.Out, "\nfaults: ")
	for _, k := range sortedKeys(sum.Faults) {
		fmt.Fprintf(cfg.Out, "%s %d (effective %d)  ", k, sum.Faults[k], sum.FaultsEffective[k])
	}
	fmt.Fprintf(cfg.Out, "\nlease events watched: %d\nunknown acquires resolved from the raft logs: %d of %d (ok %d, not applied %d, still unknown %d)\n\n",
		wt.events, stats.Resolved(), stats.Unknown, stats.ResolvedOK, stats.ResolvedNotApplied, stats.StillUnknown)
	for _, r := range sum.Results {
		fmt.Fprintln(cfg.Out, r)
	}
	fmt.Fprintf(cfg.Out, "\n%d passed, %d failed%s  (%s run, %s)\n", sum.Passed, sum.Failed, notCounted(sum.NotCounted), mode, dir)
	if sum.AllValid() && sum.NotCounted == 0 {
		// Keep the logs; the data dirs only matter when something failed
		// (a not-required result too).
		cl.Stop()
		kvProc.Kill(syscall.SIGKILL, 5*time.Second)
		for _, id := range cl.Nodes() {
			os.RemoveAll(filepath.Join(dir, "logs", id))
		}
		lost, _ := filepath.Glob(filepath.Join(dir, "logs", "lost-*")) // data dirs a restore moved aside
		for _, d := range lost {
			os.RemoveAll(d)
		}
		os.Remove(filepath.Join(dir, "logs", "kv.db"))
	}
	return sum, nil
}

// recordLines handles a worker's stdout: records into the history, pause
// notices to paused.
func recordLines(hist *Writer, mu *sync.Mutex, bad *int, paused chan PauseNotice) func(string) {
	return func(line string) {
		switch {
		case strings.HasPrefix(line, RecordPrefix):
			var r Record
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
	_ = wt.hist.Write(Record{Kind: Observe, Worker: "watch", Op: "gap-catch-up", Type: OpWatchGap, TimeNs: Now(), Error: "the watcher did not see the sentinel's release within 15s"})
	return nil
}

func mustRead(path string, flush *Writer) []byte {
	_ = flush.Flush()
	b, _ := os.ReadFile(path)
	return b
}

// CheckMeaningful says whether the run could have found anything: enough
// operations before the first fault, every enabled nemesis injected and
// seen to take effect at least once, acknowledged fenced writes, and
// linearizability operations when that workload ran. A run that is not
// meaningful is unknown, not invalid: it says nothing about the system.
func CheckMeaningful(cfg Config, h []Record, faults []Fault) Result {
	f := newFinding("run-meaningful")
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
		if r.Kind != Complete || r.Result != OK || r.ResolvedFrom != "" {
			continue // resolved afterwards: never acknowledged to the client
		}
		if first == 0 || r.TimeNs < first {
			before++
		}
		switch {
		case r.Type == OpWrite:
			writes++
		case strings.HasPrefix(r.Resource, LinPrefix):
			lin++
		}
	}
	f.r.Checked = before + writes + lin
	for _, k := range cfg.Nemeses {
		if started[k] == 0 || effective[k] == 0 {
			f.unknown("nemesis %s injected %d times, effective %d times", k, started[k], effective[k])
		}
	}
	switch {
	case len(cfg.Nemeses) > 0 && before < 10:
		f.unknown("only %d operations completed before the first fault", before)
	case writes == 0:
		f.unknown("no fenced write was acknowledged")
	case cfg.LinWorkers > 0 && lin == 0:
		f.unknown("no operation of the linearizability workload completed")
	}
	return f.done("operation")
}

func countOps(h []Record) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, r := range h {
		if r.Kind != Complete {
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
func Recheck(dir string, out io.Writer) ([]Result, error) {
	var cfg Config
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	// The resolved history when the run wrote one.
	h, err := ReadHistoryFile(filepath.Join(dir, "resolved.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		h, err = ReadHistoryFile(filepath.Join(dir, "history.jsonl"))
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
	rs := CheckAll(h, audit, cfg.SkewMargin)
	if nf, err := os.ReadFile(filepath.Join(dir, "nemesis.jsonl")); err == nil {
		faults, _ := ReadFaults(nf)
		rs = withRestoreCheck(cfg.Nemeses, rs, h, faults)
		if cfg.KeepAliveWorkers > 0 {
			rs = append(rs, CheckRenewalsBounded(h, faults))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "availability.jsonl")); err == nil {
			samples, _ := ReadProbeSamples(b)
			r, _ := CheckUnavailabilityBounded(samples, faults, UnavailabilityBound)
			rs = append(rs, r)
			if slices.Contains(cfg.Nemeses, NemMemberUnreachable) {
				rs = append(rs, CheckMembershipKeepsQuorum(samples, faults, UnavailabilityBound))
			}
		}
	}
	MarkRequired(cfg.Nemeses, rs)
	for _, r := range rs {
		fmt.Fprintln(out, r)
	}
	if err := RegenerateArtifacts(dir, h); err != nil {
		fmt.Fprintf(out, "\nartifacts: %v\n", err)
	}
	p, f := Tally(rs)
	fmt.Fprintf(out, "\n%d passed, %d failed%s  (re-check of %s)\n", p, f, notCounted(NotCounted(rs)), dir)
	return rs, nil
}

// notCounted is the closing line's note on results that are neither passed
// nor failed.
func notCounted(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d not required (invalid or unknown, not counted)", n)
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

func writeHistory(path string, h []Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := NewWriter(f)
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
