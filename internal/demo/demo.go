// Package demo is the live demonstration of what fencing prevents, with
// real processes: a three-node leased cluster, a fencedkv store, and two
// workers. Worker A acquires a lease and its token n, checks its lease, and
// is frozen with SIGSTOP right before its write; its lease runs out; worker
// B acquires the lease with token n+1 and writes; A is resumed with SIGCONT
// and writes with token n. With fencing the store refuses A's write as
// stale; in the control run (fencedkv --unfenced) A's stale write overwrites
// B's. Run prints the timeline; cmd/fencedemo is its command and `make demo`
// runs it.
package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/internal/loopback"
)

// Config is one demo run.
type Config struct {
	// BinDir holds the leased, fencedkv and fencedemo binaries.
	BinDir string
	// WorkDir holds data and logs; empty means a temporary directory,
	// removed at the end.
	WorkDir string
	// TTL is the workers' lease ttl (default 2s; the cluster accepts 1s and
	// more).
	TTL time.Duration
	// Resource is the leased resource and fencedkv key (default account/7).
	Resource string
	// Fenced and Unfenced select the runs; both false means both.
	Fenced, Unfenced bool
	// Out receives the timeline.
	Out io.Writer
}

// Outcome is what one run ended with.
type Outcome struct {
	// Fenced is true for the run with enforcement on.
	Fenced bool
	// TokenA and TokenB are the two workers' tokens (TokenB > TokenA).
	TokenA, TokenB uint64
	// AWrite is EvAccepted or EvRejected: what became of A's late write.
	AWrite string
	// Final is the stored value at the end; ValueA and ValueB what each
	// worker wrote.
	Final, ValueA, ValueB string
	// Audit is fencedkv's audit log at the end.
	Audit []fencekv.AuditRecord
}

// Main is the fencedemo command: "fencedemo [flags]" runs the demo,
// "fencedemo worker [flags]" is one worker (started by the demo itself).
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return runWorker(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("fencedemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := Config{Out: stdout}
	fs.StringVar(&cfg.BinDir, "bin-dir", "bin", "directory with leased, fencedkv and fencedemo")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "keep data and logs here (default: a temporary directory, removed)")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "lease ttl of the workers")
	fs.StringVar(&cfg.Resource, "resource", "account/7", "resource and key the workers fight over")
	fs.BoolVar(&cfg.Fenced, "fenced", false, "run only the fenced run")
	fs.BoolVar(&cfg.Unfenced, "unfenced", false, "run only the unfenced control run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "fencedemo:", err)
		return 1
	}
	return 0
}

// Run runs the demo and returns one Outcome per run (fenced first).
func Run(ctx context.Context, cfg Config) ([]Outcome, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.Resource == "" {
		cfg.Resource = "account/7"
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if !cfg.Fenced && !cfg.Unfenced {
		cfg.Fenced, cfg.Unfenced = true, true
	}
	for _, b := range []string{"leased", "fencedkv", "fencedemo"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %s (run make build): %w", b, cfg.BinDir, err)
		}
	}
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "fencedemo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.WorkDir = dir
	} else if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	d := &demo{cfg: cfg, start: time.Now()}
	defer d.stopAll()
	out, err := d.run(ctx)
	if err != nil {
		d.dumpLogs()
	}
	return out, err
}

type demo struct {
	cfg       Config
	start     time.Time
	endpoints []string
	mu        sync.Mutex
	procs     []*proc
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	lines  chan string // stdout lines, when piped
}

func (d *demo) say(who, format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, "  +%6.2fs  %-7s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) ([]Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	fmt.Fprintf(d.cfg.Out, "Starting a three-node leased cluster on loopback...\n")
	if err := d.startCluster(ctx); err != nil {
		return nil, err
	}
	var outs []Outcome
	for _, fenced := range []bool{true, false} {
		if (fenced && !d.cfg.Fenced) || (!fenced && !d.cfg.Unfenced) {
			continue
		}
		o, err := d.scenario(ctx, fenced)
		if err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

func (d *demo) startCluster(ctx context.Context) error {
	addrs, err := loopback.FreeAddrs(3)
	if err != nil {
		return err
	}
	var peers []string
	for i, a := range addrs {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, a))
	}
	for i, a := range addrs {
		id := fmt.Sprintf("n%d", i+1)
		_, err := d.spawn(id, filepath.Join(d.cfg.BinDir, "leased"), false,
			"--insecure", "--id", id, "--listen", a, "--data-dir", filepath.Join(d.cfg.WorkDir, id),
			"--bootstrap", strings.Join(peers, ","),
			"--min-ttl", "1s", "--skew-margin", "300ms", "--tick", "250ms")
		if err != nil {
			return err
		}
	}
	d.endpoints = addrs
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	id, err := leader(lctx, addrs)
	if err != nil {
		return err
	}
	d.start = time.Now()
	d.say("cluster", "3 leased nodes up at %s, leader %s", strings.Join(addrs, ","), id)
	return nil
}

// spawn starts a process with its stderr (and, unless pipe, its stdout) in
// a log file under WorkDir.
func (d *demo) spawn(name, bin string, pipe bool, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(d.cfg.WorkDir, name+".log"), exited: make(chan struct{})}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	// Race-enabled builds (as in the tests) otherwise linger 1 s at exit.
	p.cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p.cmd.Stderr = logf
	var stdout io.ReadCloser
	if pipe {
		if stdout, err = p.cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
		p.lines = make(chan string, 64)
	} else {
		p.cmd.Stdout = logf
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	go func() {
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				fmt.Fprintln(logf, sc.Text())
				p.lines <- sc.Text()
			}
			close(p.lines)
		}
		p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// stopAll kills every process still running (a frozen worker included) and
// waits for it.
func (d *demo) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.procs {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, p := range d.procs {
		if p.lines != nil {
			for range p.lines { // drain, so the reader can finish
			}
		}
		<-p.exited
	}
	d.procs = nil
}

func (d *demo) dumpLogs() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.procs {
		b, _ := os.ReadFile(p.log)
		if len(b) > 2048 {
			b = b[len(b)-2048:]
		}
		fmt.Fprintf(d.cfg.Out, "---- %s (last 2 KiB of %s) ----\n%s\n", p.name, p.log, b)
	}
}

// line waits for the next stdout line of p.
func line(ctx context.Context, p *proc) (string, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s exited", p.name)
		}
		return l, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for %s: %w", p.name, ctx.Err())
	}
}

// event waits for the next event of worker p and fails on EvFailed or on
// any other event than want.
func event(ctx context.Context, p *proc, want string) (Event, error) {
	for {
		l, err := line(ctx, p)
		if err != nil {
			return Event{}, err
		}
		rest, ok := strings.CutPrefix(l, EventPrefix)
		if !ok {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(rest), &e); err != nil {
			return Event{}, fmt.Errorf("%s: bad event %q", p.name, l)
		}
		if e.What == EvFailed {
			return e, fmt.Errorf("worker %s failed: %s", p.name, e.Detail)
		}
		if want != "" && e.What != want {
			return e, fmt.Errorf("worker %s: event %s, want %s", p.name, e.What, want)
		}
		return e, nil
	}
}

// waitStopped polls /proc until p is in the stopped state.
func waitStopped(ctx context.Context, p *proc) error {
	path := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never stopped: %w", p.name, ctx.Err())
		case <-p.exited:
			return fmt.Errorf("%s exited instead of stopping", p.name)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (d *demo) scenario(ctx context.Context, fenced bool) (Outcome, error) {
	o := Outcome{Fenced: fenced, ValueA: "written by A", ValueB: "written by B"}
	mode, kvArgs := "fenced", []string{}
	if !fenced {
		mode, kvArgs = "unfenced", []string{"--unfenced"}
	}
	fmt.Fprintf(d.cfg.Out, "\n=== %s run: fencedkv %s ===\n", strings.ToUpper(mode[:1])+mode[1:],
		map[bool]string{true: "enforces fencing tokens", false: "runs with --unfenced (the control run)"}[fenced])
	kv, err := d.spawn("fencedkv-"+mode, filepath.Join(d.cfg.BinDir, "fencedkv"), true, append([]string{
		"--listen", "127.0.0.1:0", "--data-file", filepath.Join(d.cfg.WorkDir, "kv-"+mode+".db")}, kvArgs...)...)
	if err != nil {
		return o, err
	}
	l, err := line(ctx, kv)
	if err != nil {
		return o, err
	}
	f := strings.Fields(l) // "fencedkv serving on ADDR (...)"
	if len(f) < 4 {
		return o, fmt.Errorf("fencedkv said %q", l)
	}
	kvURL := "http://" + f[3]
	go func() { // keep draining its stdout
		for range kv.lines {
		}
	}()
	d.say("kv", "fencedkv serving %s at %s", mode, f[3])

	worker := func(name, value string, extra ...string) (*proc, error) {
		return d.spawn("worker-"+name+"-"+mode, filepath.Join(d.cfg.BinDir, "fencedemo"), true, append([]string{"worker",
			"--name", name, "--endpoints", strings.Join(d.endpoints, ","), "--resource", d.cfg.Resource,
			"--kv", kvURL, "--value", value, "--ttl", d.cfg.TTL.String()}, extra...)...)
	}
	a, err := worker("A", o.ValueA, "--wait", "--freeze-before-write")
	if err != nil {
		return o, err
	}
	e, err := event(ctx, a, EvAcquired)
	if err != nil {
		return o, err
	}
	o.TokenA = e.Token
	d.say("A", "acquired %s with token %d (ttl %s)", d.cfg.Resource, e.Token, d.cfg.TTL)
	if e, err = event(ctx, a, EvChecked); err != nil {
		return o, err
	}
	d.say("A", "checked its lease before writing: %s, safe to write %q", e.Detail, o.ValueA)
	if _, err = event(ctx, a, EvFreezing); err != nil {
		return o, err
	}
	if err := waitStopped(ctx, a); err != nil {
		return o, err
	}
	d.say("A", "FROZEN by SIGSTOP just before its write (a GC pause, a VM suspend)")

	d.say("B", "asks for %s and queues until A's lease runs out", d.cfg.Resource)
	b, err := worker("B", o.ValueB, "--wait")
	if err != nil {
		return o, err
	}
	if e, err = event(ctx, b, EvAcquired); err != nil {
		return o, err
	}
	o.TokenB = e.Token
	d.say("B", "acquired %s with token %d: A's lease expired while A was frozen", d.cfg.Resource, e.Token)
	if _, err = event(ctx, b, EvChecked); err != nil {
		return o, err
	}
	if e, err = event(ctx, b, ""); err != nil {
		return o, err
	}
	if e.What != EvAccepted {
		return o, fmt.Errorf("B's write with token %d: %s", o.TokenB, e.What)
	}
	d.say("B", "wrote %q with token %d: accepted", o.ValueB, o.TokenB)
	select {
	case <-b.exited:
	case <-ctx.Done():
		return o, ctx.Err()
	}

	if err := waitStopped(ctx, a); err != nil { // still frozen: nobody else woke it
		return o, err
	}
	d.say("demo", "SIGCONT to A")
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return o, err
	}
	if e, err = event(ctx, a, EvResumed); err != nil {
		return o, err
	}
	d.say("A", "resumed after %s frozen; still sure it holds token %d, it sends its write", e.Detail, o.TokenA)
	if e, err = event(ctx, a, ""); err != nil {
		return o, err
	}
	o.AWrite = e.What
	switch e.What {
	case EvRejected:
		d.say("A", "write with token %d REJECTED: stale token, highest accepted is %d", o.TokenA, e.Highest)
	case EvAccepted:
		d.say("A", "write with token %d ACCEPTED: it overwrote B's newer value", o.TokenA)
	default:
		return o, fmt.Errorf("A's write: %s", e.What)
	}
	select {
	case <-a.exited:
	case <-ctx.Done():
		return o, ctx.Err()
	}

	c := &fencekv.Client{BaseURL: kvURL}
	v, _, err := c.Get(ctx, d.cfg.Resource)
	if err != nil {
		return o, err
	}
	o.Final = string(v)
	if o.Audit, err = c.AuditAll(ctx); err != nil {
		return o, err
	}
	for _, r := range o.Audit {
		d.say("audit", "#%d %s token %d (highest before: %d): %s", r.Seq, r.Op, r.Token, r.Highest, r.Outcome)
	}
	if fenced {
		d.say("result", "%s = %q: fencing kept B's write; A's stale write was refused and audited", d.cfg.Resource, o.Final)
	} else {
		d.say("result", "%s = %q: without fencing, A's stale write silently replaced B's (a lost update)", d.cfg.Resource, o.Final)
	}
	kv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-kv.exited:
	case <-ctx.Done():
	}
	return o, nil
}
