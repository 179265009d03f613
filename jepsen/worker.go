package jepsen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// Lines a worker prints on stdout.
const (
	// RecordPrefix starts a history record (JSON).
	RecordPrefix = "REC "
	// PausingPrefix starts the notice a worker prints right before it
	// stops itself for a client pause (JSON PauseNotice).
	PausingPrefix = "PAUSING "
)

// Commands the harness writes to a worker's stdin.
const (
	// CmdPause makes the worker stop itself (SIGSTOP) at its next write,
	// after its grant, claim and read and before the write that depends on
	// them.
	CmdPause = "pause"
	// CmdPauseAcquire makes the worker stop itself when the answer to its
	// next acquire has arrived, before its client library sees it: to the
	// library, an answer that came late.
	CmdPauseAcquire = "pause-acquire"
	// CmdPauseReplay makes the worker's next acquire lose its first answer
	// (held back for about half the ttl, then Unavailable, as a network
	// that finally drops it), so that the client library's retry, under
	// the same request id, is answered with a replay that has less than
	// the ttl left; the worker then stops itself at that lease's write.
	CmdPauseReplay = "pause-replay"
	// CmdStop makes the worker finish its current operation, release and
	// exit.
	CmdStop = "stop"
)

// PauseNotice is what a worker says before it stops itself.
type PauseNotice = nm.PauseNotice

// WorkerConfig is one worker process.
type WorkerConfig struct {
	ID        string
	Endpoints []string
	KV        string
	Resources []string
	TTL       time.Duration
	// SkewMargin is the nodes' skew margin: a stalled worker renews just
	// after its lease's expires_at, inside the margin, to probe the rule
	// that such a renewal is refused.
	SkewMargin time.Duration
	Duration   time.Duration
	MaxOps     int
	Seed       uint64
	// Lin selects the linearizability workload: acquire, read, release
	// with a ttl longer than the run, no fenced writes.
	Lin bool
	// KeepAlive selects the keep-alive workload (keepalive.go): leases
	// with KeepAliveTTLs held across idle gaps.
	KeepAlive bool
	// Bugs are planted client defects (client.PlantedBugs) to switch on in
	// this worker's client library: only a plantedbugs build of the worker
	// has them. WorkerMain takes them from LEASEFENCE_PLANTED_BUGS.
	Bugs []string
	// Drift and ClientMargin are the client's (0: its defaults);
	// ClockRate, unless 0 or 1, runs its clock at that rate of
	// CLOCK_BOOTTIME, and ClockTick, unless 0, makes it read in ticks
	// (NemClockDriftEdge, driftedge.go).
	Drift        float64
	ClientMargin time.Duration
	ClockRate    float64
	ClockTick    time.Duration
}

// WorkerMain is the hidden "jepsen worker" subcommand.
func WorkerMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jepsen worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c WorkerConfig
	var endpoints, resources string
	fs.StringVar(&c.ID, "id", "w1", "worker id")
	fs.StringVar(&endpoints, "endpoints", "", "leased addresses, comma-separated")
	fs.StringVar(&c.KV, "kv", "", "fencedkv base URL")
	fs.StringVar(&resources, "resources", "", "resources, comma-separated (also the fencedkv keys)")
	fs.DurationVar(&c.TTL, "ttl", 2*time.Second, "lease ttl")
	fs.DurationVar(&c.SkewMargin, "skew-margin", 300*time.Millisecond, "the nodes' skew margin")
	fs.DurationVar(&c.Duration, "duration", time.Minute, "stop after this long")
	fs.IntVar(&c.MaxOps, "max-ops", 100000, "stop after this many cycles")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.BoolVar(&c.Lin, "lin", false, "linearizability workload: acquire, read, release; ttl longer than the run")
	fs.BoolVar(&c.KeepAlive, "keepalive", false, "keep-alive workload: 10s and 30s ttls held across idle gaps")
	fs.Float64Var(&c.Drift, "drift", 0, "the client's drift bound (0: its default)")
	fs.DurationVar(&c.ClientMargin, "client-margin", 0, "the client's margin (0: its default)")
	fs.Float64Var(&c.ClockRate, "clock-rate", 0, "run the client's clock at this rate of CLOCK_BOOTTIME (0: at its rate)")
	fs.DurationVar(&c.ClockTick, "clock-tick", 0, "the client's clock reads in ticks of this (0: to the nanosecond)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if env := os.Getenv("LEASEFENCE_PLANTED_BUGS"); env != "" {
		c.Bugs = strings.Split(env, ",")
	}
	c.Endpoints = strings.Split(endpoints, ",")
	c.Resources = strings.Split(resources, ",")
	if endpoints == "" || resources == "" || c.KV == "" {
		fmt.Fprintln(stderr, "jepsen worker: --endpoints, --kv and --resources are required")
		return 2
	}
	if err := RunWorker(c, stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "jepsen worker:", err)
		return 1
	}
	return 0
}

type workerState struct {
	cfg   WorkerConfig
	mu    sync.Mutex
	out   io.Writer
	pause atomic.Bool
	// pauseAcquire arms a stop at the next acquire's answer.
	pauseAcquire atomic.Bool
	// pauseReplay arms a lost answer and a stop in the next fenced cycle;
	// loseAnswer is set while that cycle's acquire runs.
	pauseReplay atomic.Bool
	loseAnswer  atomic.Bool
	// host is the simulated host's monotonic clock, which stands still
	// while the worker is stopped (see hostClock).
	host *hostClock
	// clock is the client's clock when it runs at another rate or in
	// ticks (nil: the client's own, client.BootClock).
	clock  *rateClock
	ka     kaCounter
	stop   atomic.Bool
	leases *client.Client
	kv     *fencekv.Client
	rng    *rand.Rand
	n      int
	conns  map[int]*grpc.ClientConn // for explicit calls, guarded by mu
	// released remembers the last lease this worker released on each
	// resource, for the stale-release probe of the lin workload.
	released map[string]staleLease
}

type staleLease struct {
	id    []byte
	token uint64
}

// RunWorker loops acquire → fenced read-modify-write → release until its
// duration, MaxOps or a stop command, printing every invocation and
// completion as a record.
func RunWorker(c WorkerConfig, stdin io.Reader, stdout io.Writer) error {
	w := &workerState{cfg: c, out: stdout, rng: rand.New(rand.NewPCG(c.Seed, 0x6a657073656e)),
		kv: &fencekv.Client{BaseURL: c.KV}, host: newHostClock()}
	knobs, err := clientTesting(c.Bugs, w.host)
	if err != nil {
		return err
	}
	var clock client.Clock
	if (c.ClockRate != 0 && c.ClockRate != 1) || c.ClockTick > 0 {
		w.clock = newRateClock(c.ClockRate, c.ClockTick)
		clock = w.clock
	}
	leases, err := client.New(client.Config{Endpoints: c.Endpoints, RequestTimeout: 2 * time.Second, RetryFor: 4 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(w.interceptAcquire), grpc.WithStreamInterceptor(w.ka.intercept)},
		Drift:       c.Drift, Margin: c.ClientMargin, Clock: clock, Testing: knobs})
	if err != nil {
		return err
	}
	defer leases.Close()
	w.leases = leases
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case CmdPause:
				w.pause.Store(true)
			case CmdPauseAcquire:
				w.pauseAcquire.Store(true)
			case CmdPauseReplay:
				w.pauseReplay.Store(true)
			case CmdStop:
				w.stop.Store(true)
			}
		}
		// stdin closed: the harness is gone or wants us to stop.
		w.stop.Store(true)
	}()
	defer func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, cc := range w.conns {
			cc.Close()
		}
	}()
	deadline := time.Now().Add(c.Duration)
	for w.n < c.MaxOps && time.Now().Before(deadline) && !w.stop.Load() {
		w.n++
		switch {
		case c.Lin:
			w.linCycle()
		case c.KeepAlive:
			w.keepAliveCycle()
		case w.rng.IntN(8) == 0:
			w.stallCycle()
		default:
			w.cycle()
		}
	}
	return nil
}

func (w *workerState) emit(r history.Record) {
	r.Worker = w.cfg.ID
	if r.TimeNs == 0 {
		r.TimeNs = history.Now()
	}
	b, _ := json.Marshal(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, "%s%s\n", RecordPrefix, b)
}

// safeUntilNs is the real time (CLOCK_BOOTTIME) at which the lease's safe
// deadline passes on the client's clock. SafeUntil states it as the
// client sees it, on a clock it takes to be exact.
func (w *workerState) safeUntilNs(l *client.Lease) int64 {
	if w.clock != nil {
		return w.clock.deadlineNs(l)
	}
	return history.Now() + int64(time.Until(l.SafeUntil()))
}

func (w *workerState) sleep(min, max time.Duration) {
	time.Sleep(min + time.Duration(w.rng.Int64N(int64(max-min)+1)))
}

// cycle is one acquire, write, release.
func (w *workerState) cycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	replay := w.pauseReplay.Swap(false)
	w.loseAnswer.Store(replay)
	lease, err := w.acquire(base+"-a", res)
	w.loseAnswer.Store(false)
	if replay {
		if err == nil {
			w.pause.Store(true) // stop at this lease's write
		} else {
			w.pauseReplay.Store(true) // try again in the next cycle
		}
	}
	if err != nil {
		w.sleep(10*time.Millisecond, 80*time.Millisecond)
		return
	}
	tok := fence.TokenOf(lease)

	w.write(base+"-w", res, tok, lease.ID().String(), lease.Err, func() int64 { return w.safeUntilNs(lease) })
	// Sometimes send the acquire's request id again with one parameter
	// changed, while the lease is held: it must be refused, never replayed.
	if w.rng.IntN(4) == 0 {
		w.reuse(base+"-u", res, RequestIDOf(base+"-a"), reuseChanges[w.rng.IntN(len(reuseChanges))])
	}

	// Sometimes hold the lease past a keep-alive renewal.
	if w.rng.IntN(10) == 0 {
		w.sleep(w.cfg.TTL/2, w.cfg.TTL)
	} else {
		w.sleep(0, 30*time.Millisecond)
	}

	w.release(base+"-r", res, lease)
	// Sometimes send it again unchanged, long after its answer: the grant
	// has ended, so it is refused, never granted afresh.
	if w.rng.IntN(6) == 0 {
		w.reuse(base+"-d", res, RequestIDOf(base+"-a"), "")
	}
	w.sleep(0, 20*time.Millisecond)
}

// reuseChanges are the parameters an OpReuse changes.
var reuseChanges = []string{"resource", "scope", "holder", "ttl", "wait"}

// reuse sends the acquire of res that used request id rid again through
// the API, as the client library sent it but with change applied, and
// records the answer (OpReuse; a lease in Value and Token).
func (w *workerState) reuse(op, res, rid, change string) {
	req := &api.AcquireRequest{Resource: res, Holder: w.cfg.ID, Ttl: durationpb.New(w.cfg.TTL), RequestId: rid}
	switch change {
	case "resource":
		for _, r := range w.cfg.Resources {
			if r != res {
				req.Resource = r
				break
			}
		}
	case "scope":
		req.Scope = "jepsen-reuse-scope"
	case "holder":
		req.Holder = w.cfg.ID + "-other"
	case "ttl":
		req.Ttl = durationpb.New(w.cfg.TTL + time.Second)
	case "wait":
		req.Wait = true
	}
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpReuse, Resource: req.Resource, RequestID: rid, Changed: change}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.Result = history.Complete, 0, history.Unknown
	var lease *api.Lease
	err := w.callNodes(func(ctx context.Context, c api.LeaseServiceClient) (bool, error) {
		resp, err := c.Acquire(ctx, req)
		if err == nil {
			lease = resp.Lease
		}
		switch status.Code(err) {
		case codes.OK, codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound:
			return true, err
		}
		return false, err
	})
	switch code := status.Code(err); {
	case err == nil && lease != nil:
		done.Result, done.Token, done.Value = history.OK, lease.Token, api.FormatLeaseID(lease.Id)
	case code == codes.FailedPrecondition, code == codes.InvalidArgument, code == codes.NotFound:
		done.Result, done.Error = history.Fail, err.Error()
	case err != nil:
		done.Error = err.Error()
	}
	w.emit(done)
}

// acquire acquires res through the client library (no wait; the request
// id derived from op) and records the invocation and its completion.
func (w *workerState) acquire(op, res string) (*client.Lease, error) {
	acq := history.Record{Kind: history.Invoke, Op: op, Type: history.OpAcquire, Resource: res, RequestID: RequestIDOf(op)}
	w.emit(acq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	lease, err := w.leases.Acquire(ctx, res, client.WithTTL(w.cfg.TTL), client.WithHolder(w.cfg.ID), client.WithRequestID(acq.RequestID))
	cancel()
	done := acq
	done.Kind, done.TimeNs = history.Complete, 0
	if err != nil {
		done.Result, done.Error = acquireOutcome(err), acquireError(err)
	} else {
		done.Result, done.Token, done.Lease, done.SafeUntilNs = history.OK, lease.Token(), lease.ID().String(), w.safeUntilNs(lease)
	}
	w.emit(done)
	return lease, err
}

// release releases lease through the client library and records it (an
// error is an unknown outcome).
func (w *workerState) release(op, res string, lease *client.Lease) error {
	rel := history.Record{Kind: history.Invoke, Op: op, Type: history.OpRelease, Resource: res, Token: lease.Token(), Lease: lease.ID().String(), SafeUntilNs: w.safeUntilNs(lease)}
	w.emit(rel)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := lease.Release(ctx)
	cancel()
	done := rel
	done.Kind, done.TimeNs, done.SafeUntilNs = history.Complete, 0, 0
	if err != nil {
		done.Result, done.Error = history.Unknown, err.Error()
	} else {
		done.Result = history.OK
	}
	w.emit(done)
	return err
}

// write appends a unique element to the resource's key as a fenced
// read-modify-write: a claim (an empty fenced append, which raises the
// key's highest token to ours before we read), a read, then a fenced put
// of the value read plus the element. With fencing, a put by a holder
// whose lease has moved on is refused, because the newer holder's claim
// came before the newer holder's read; without fencing the stale put
// overwrites, and the newer holder's elements are lost.
//
// check, when set, is asked before the write (a careful worker never starts
// a write on a lease that has run out); a careless one passes nil. safe
// gives the safe-until time recorded with the write (0: none).
func (w *workerState) write(op, res string, tok fence.Token, leaseID string, check func() error, safe func() int64) {
	elem := op
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpWrite, Resource: res, Element: elem, Token: tok.Value, Lease: leaseID, SafeUntilNs: safe()}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.SafeUntilNs = history.Complete, 0, 0
	finish := func(result string, err error) {
		done.Result = result
		if err != nil {
			done.Error = err.Error()
		}
		done.SafeUntilNs = safe()
		w.emit(done)
	}
	if check != nil {
		if err := check(); err != nil {
			finish(history.Fail, fmt.Errorf("not sent: %w", err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.kv.Append(ctx, res, tok, nil); err != nil {
		finish(history.Fail, fmt.Errorf("claim failed, element not sent: %w", err))
		return
	}
	old, _, err := w.kv.Get(ctx, res)
	if err != nil && !errors.Is(err, fencekv.ErrNotFound) {
		finish(history.Fail, fmt.Errorf("read failed, element not sent: %w", err))
		return
	}
	if w.pause.Swap(false) {
		if err := w.suspend(PauseNotice{Worker: w.cfg.ID, Op: inv.Op, Resource: res, Token: tok.Value}); err != nil {
			finish(history.Fail, fmt.Errorf("SIGSTOP failed, element not sent: %w", err))
			return
		}
		// Resumed by SIGCONT, our read and our lease check long out of date.
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
	}
	value := strings.TrimSpace(string(old) + checker.ElementSep + elem)
	_, err = w.kv.Put(ctx, res, tok, []byte(value))
	switch {
	case err == nil:
		finish(history.OK, nil)
	case errors.Is(err, fencekv.ErrIndeterminate):
		finish(history.Unknown, err)
	default:
		finish(history.Fail, err)
	}
}

// RequestIDOf is history.RequestIDOf.
func RequestIDOf(op string) string { return history.RequestIDOf(op) }

func acquireError(err error) string {
	if errors.Is(err, client.ErrHeld) {
		return history.HeldPrefix + err.Error()
	}
	return err.Error()
}

// linCycle is one round of the linearizability workload: acquire (no
// wait), sometimes read, release, read; refused, read up to three times.
// Leases live longer than the run, so expiry never enters the model.
func (w *workerState) linCycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	lease, err := w.acquire(base+"-a", res)
	if err != nil {
		// Someone else holds it: sometimes try to release it with the
		// lease this worker released earlier. It must not be released.
		if old, ok := w.released[res]; ok && errors.Is(err, client.ErrHeld) && w.rng.IntN(3) == 0 {
			w.rawRelease(base+"-s", res, old.id, old.token)
		}
		// Then look who holds it, as a waiter polls: one to three reads,
		// the later ones while others' writes may be under way (a read
		// right after a write of its own reaches a leader that has just
		// applied it, and so shows little of how reads keep up).
		for i := range 1 + w.rng.IntN(3) {
			if i > 0 {
				w.sleep(5*time.Millisecond, 20*time.Millisecond)
			}
			w.linRead(fmt.Sprintf("%s-g%d", base, i), res)
		}
		w.sleep(5*time.Millisecond, 40*time.Millisecond)
		return
	}
	if w.rng.IntN(2) == 0 {
		w.linRead(base+"-h", res)
	}
	if w.rng.IntN(2) == 0 {
		w.renew(base+"-n", res, lease.ID(), lease.Token())
	}
	w.sleep(0, 50*time.Millisecond)
	if w.release(base+"-r", res, lease) == nil {
		if w.released == nil {
			w.released = map[string]staleLease{}
		}
		id := lease.ID()
		w.released[res] = staleLease{id: id[:], token: lease.Token()}
	}
	w.linRead(base+"-g", res)
	w.sleep(10*time.Millisecond, 60*time.Millisecond)
}

// renew renews a lease with an explicit Renew call (the client library
// renews through its keep-alive stream, which the history does not see):
// ok, fail (NotFound: the lease is gone) or unknown. It goes straight to
// the API, trying each node in turn (followers forward to the leader).
func (w *workerState) renew(op, res string, id client.ID, token uint64) {
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpRenew, Resource: res, Lease: id.String(), Token: token}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs = history.Complete, 0
	done.Result = history.Unknown
	err := w.callNodes(func(ctx context.Context, c api.LeaseServiceClient) (bool, error) {
		_, err := c.Renew(ctx, &api.RenewRequest{LeaseId: id[:]})
		return err == nil || status.Code(err) == codes.NotFound, err
	})
	switch {
	case err == nil:
		done.Result, done.Error = history.OK, ""
	case status.Code(err) == codes.NotFound:
		done.Result, done.Error = history.Fail, err.Error()
	default:
		done.Error = err.Error()
	}
	w.emit(done)
}

// callNodes makes call on one node after another, from one picked at
// random (followers forward to the leader), until call says its answer is
// final or 5 s have passed (at most 20 tries of 2 s); it returns the last
// error.
func (w *workerState) callNodes(call func(ctx context.Context, c api.LeaseServiceClient) (final bool, err error)) error {
	err := errors.New("no node could be called")
	deadline := time.Now().Add(5 * time.Second)
	start := w.rng.IntN(len(w.cfg.Endpoints))
	for i := 0; i < 20 && time.Now().Before(deadline); i++ {
		conn := w.conn((start + i) % len(w.cfg.Endpoints))
		if conn == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		final, cerr := call(ctx, api.NewLeaseServiceClient(conn))
		cancel()
		if err = cerr; final {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (w *workerState) conn(i int) *grpc.ClientConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		w.conns = map[int]*grpc.ClientConn{}
	}
	if c, ok := w.conns[i]; ok {
		return c
	}
	c, err := grpc.NewClient(w.cfg.Endpoints[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil
	}
	w.conns[i] = c
	return c
}

// linRead reads the lease on res linearizably: Lease is the holder's lease
// id ("" when free), Token the scope's highest token.
func (w *workerState) linRead(op, res string) {
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpRead, Resource: res}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.Result = history.Complete, 0, history.Unknown
	// Each read goes to a node picked at random (followers answer through
	// the leader), so a node that answered from its own state without
	// confirming it is current would be seen.
	err := w.callNodes(func(ctx context.Context, c api.LeaseServiceClient) (bool, error) {
		g, err := c.Get(ctx, &api.GetRequest{Resource: res})
		if err == nil {
			done.Result, done.Token, done.AppliedIndex = history.OK, g.ScopeToken, g.AppliedIndex
			if g.Lease != nil {
				done.Lease = api.FormatLeaseID(g.Lease.Id)
			}
		}
		return err == nil, err
	})
	if err != nil {
		done.Error = err.Error()
	}
	w.emit(done)
}

// acquireOutcome classifies a failed Acquire: refused (fail) or possibly
// granted (unknown).
func acquireOutcome(err error) string {
	switch {
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrInvalidArgument):
		return history.Fail
	case errors.Is(err, client.ErrLeaseLost):
		return history.Fail
	}
	return history.Unknown
}

// suspend says why it stops (note), then stops the whole process, as a
// host suspend would: the simulated host's monotonic clock stands still
// until it is resumed.
func (w *workerState) suspend(note PauseNotice) error {
	b, _ := json.Marshal(note)
	w.mu.Lock()
	fmt.Fprintf(w.out, "%s%s\n", PausingPrefix, b)
	w.mu.Unlock()
	w.host.freeze()
	defer w.host.thaw()
	return stopSelf()
}

// interceptAcquire is the unary interceptor of the worker's client
// library: when a pause at an acquire answer is armed, it stops the worker
// once an Acquire's answer (a grant) has arrived and before the library
// sees it, so the library gets an answer that came late.
func (w *workerState) interceptAcquire(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	resp, ok := reply.(*api.AcquireResponse)
	if err != nil || !ok || resp.Lease == nil {
		return err
	}
	if !resp.Replayed && w.loseAnswer.Load() {
		// Lose the grant's answer after holding it back for about half
		// the ttl: the library retries under the same request id, and the
		// replay that answers it has that much less ttl left.
		hold := w.cfg.TTL / 2
		if dl, ok := ctx.Deadline(); ok {
			hold = min(hold, time.Until(dl)-100*time.Millisecond)
		}
		time.Sleep(hold)
		return status.Errorf(codes.Unavailable, "jepsen: the answer to %s was lost (injected after %v)", req.(*api.AcquireRequest).GetRequestId(), hold.Round(time.Millisecond))
	}
	if !w.pauseAcquire.Swap(false) {
		return nil
	}
	op := strings.TrimPrefix(req.(*api.AcquireRequest).GetRequestId(), RequestIDOf(""))
	if serr := w.suspend(PauseNotice{Worker: w.cfg.ID, Op: op, Resource: resp.Lease.Resource, Token: resp.Lease.Token}); serr != nil {
		fmt.Fprintln(os.Stderr, "jepsen worker: SIGSTOP at an acquire answer failed:", serr)
	}
	return nil
}

// hostClock is what Go's monotonic clock reads on the worker's simulated
// host, for the planted client bug client-monotonic-clock: CLOCK_BOOTTIME
// less the time the worker spent stopped. A SIGSTOP of the worker stands
// for a suspend of its host, which CLOCK_BOOTTIME counts and the
// monotonic clock does not; the correct client measures on the first
// (client.BootClock), the planted one on this.
type hostClock struct {
	mu     sync.Mutex
	frozen time.Duration // boot reading at the stop; 0 while running
	lost   time.Duration // time spent stopped so far
}

func newHostClock() *hostClock { return &hostClock{} }

func (h *hostClock) Now() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen != 0 {
		return h.frozen - h.lost
	}
	return client.BootClock{}.Now() - h.lost
}

// freeze stops the clock (the host goes to sleep); thaw restarts it where
// it stopped.
func (h *hostClock) freeze() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frozen = client.BootClock{}.Now()
}

func (h *hostClock) thaw() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen != 0 {
		h.lost += client.BootClock{}.Now() - h.frozen
		h.frozen = 0
	}
}

// stopSelf stops the whole process with a thread-directed SIGSTOP, taken
// before the system call returns (see internal/demo).
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// stallCycle is a worker that stalls past its ttl without a keep-alive: it
// acquires through the API directly (so nothing renews the lease), writes,
// stalls, renews explicitly, writes again without looking at its lease
// (a careless worker, which only fencing protects), and releases. Half the
// stalls end inside the skew margin after expires_at, where the renewal
// must be refused although the lease is not yet removed; the other half
// end after the margin, when another worker may hold a newer token.
func (w *workerState) stallCycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	l, ok := w.rawAcquire(base+"-a", res, w.cfg.TTL)
	if !ok {
		w.sleep(10*time.Millisecond, 80*time.Millisecond)
		return
	}
	id := client.ID(l.Id[:16])
	noSafe := func() int64 { return 0 }
	tok := fence.Token{Scope: l.Scope, Value: l.Token}
	w.write(base+"-w", res, tok, id.String(), nil, noSafe)
	m := w.cfg.SkewMargin
	if w.rng.IntN(2) == 0 {
		w.sleep(w.cfg.TTL+m/10, w.cfg.TTL+m*6/10) // inside the margin
	} else {
		w.sleep(w.cfg.TTL+m+200*time.Millisecond, w.cfg.TTL+m+time.Second)
	}
	w.renew(base+"-n", res, id, l.Token)
	w.write(base+"-x", res, tok, id.String(), nil, noSafe)
	w.rawRelease(base+"-r", res, l.Id, l.Token)
	w.sleep(0, 20*time.Millisecond)
}

// rawAcquire acquires res through the API (no keep-alive), trying the
// nodes in turn with one request id, and records it.
func (w *workerState) rawAcquire(op, res string, ttl time.Duration) (*api.Lease, bool) {
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpAcquire, Resource: res, RequestID: RequestIDOf(op)}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.Result = history.Complete, 0, history.Unknown
	req := &api.AcquireRequest{Resource: res, Holder: w.cfg.ID, Ttl: durationpb.New(ttl), RequestId: inv.RequestID}
	var lease *api.Lease
	err := w.callNodes(func(ctx context.Context, c api.LeaseServiceClient) (bool, error) {
		resp, err := c.Acquire(ctx, req)
		if err == nil && (resp.Lease == nil || len(resp.Lease.Id) != 16) {
			return false, fmt.Errorf("malformed answer %v", resp)
		}
		if err == nil {
			lease = resp.Lease
		}
		code := status.Code(err)
		return err == nil || code == codes.FailedPrecondition || code == codes.InvalidArgument, err
	})
	switch code := status.Code(err); {
	case err == nil:
		done.Result, done.Token, done.Lease = history.OK, lease.Token, api.FormatLeaseID(lease.Id)
	case code == codes.FailedPrecondition:
		done.Result, done.Error = history.Fail, history.HeldPrefix+err.Error()
	case code == codes.InvalidArgument:
		done.Result, done.Error = history.Fail, err.Error()
	default:
		done.Error = err.Error()
	}
	w.emit(done)
	return lease, lease != nil
}

// rawRelease releases a lease by id through the API and records whether
// the node said it released it (Value "released" or "not-released").
func (w *workerState) rawRelease(op, res string, id []byte, token uint64) {
	inv := history.Record{Kind: history.Invoke, Op: op, Type: history.OpRelease, Resource: res, Lease: api.FormatLeaseID(id), Token: token}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.Result = history.Complete, 0, history.Unknown
	err := w.callNodes(func(ctx context.Context, c api.LeaseServiceClient) (bool, error) {
		resp, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: id})
		if err == nil {
			done.Result, done.Value = history.OK, history.NotReleased
			if resp.Released {
				done.Value = history.Released
			}
		}
		return err == nil, err
	})
	if err != nil {
		done.Error = err.Error()
	}
	w.emit(done)
}
