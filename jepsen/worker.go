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

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencekv"
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
	// CmdStop makes the worker finish its current operation, release and
	// exit.
	CmdStop = "stop"
)

// PauseNotice is what a worker says before it stops itself.
type PauseNotice struct {
	Worker   string `json:"worker"`
	Op       string `json:"op"`
	Resource string `json:"resource"`
	Token    uint64 `json:"token"`
}

// WorkerConfig is one worker process.
type WorkerConfig struct {
	ID        string
	Endpoints []string
	KV        string
	Resources []string
	TTL       time.Duration
	Duration  time.Duration
	MaxOps    int
	Seed      uint64
	// Lin selects the linearizability workload: acquire, read, release
	// with a ttl longer than the run, no fenced writes.
	Lin bool
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
	fs.DurationVar(&c.Duration, "duration", time.Minute, "stop after this long")
	fs.IntVar(&c.MaxOps, "max-ops", 100000, "stop after this many cycles")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.BoolVar(&c.Lin, "lin", false, "linearizability workload: acquire, read, release; ttl longer than the run")
	if err := fs.Parse(args); err != nil {
		return 2
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
	cfg    WorkerConfig
	mu     sync.Mutex
	out    io.Writer
	pause  atomic.Bool
	stop   atomic.Bool
	leases *client.Client
	kv     *fencekv.Client
	rng    *rand.Rand
	n      int
	conns  map[int]*grpc.ClientConn // for explicit renewals, guarded by mu
}

// RunWorker loops acquire → fenced read-modify-write → release until its
// duration, MaxOps or a stop command, printing every invocation and
// completion as a record.
func RunWorker(c WorkerConfig, stdin io.Reader, stdout io.Writer) error {
	leases, err := client.New(client.Config{Endpoints: c.Endpoints, RequestTimeout: 2 * time.Second, RetryFor: 4 * time.Second})
	if err != nil {
		return err
	}
	defer leases.Close()
	w := &workerState{cfg: c, out: stdout, leases: leases, rng: rand.New(rand.NewPCG(c.Seed, 0x6a657073656e)),
		kv: &fencekv.Client{BaseURL: c.KV}}
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case CmdPause:
				w.pause.Store(true)
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
		if c.Lin {
			w.linCycle()
		} else {
			w.cycle()
		}
	}
	return nil
}

func (w *workerState) emit(r Record) {
	r.Worker = w.cfg.ID
	if r.TimeNs == 0 {
		r.TimeNs = Now()
	}
	b, _ := json.Marshal(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, "%s%s\n", RecordPrefix, b)
}

func safeUntilNs(l *client.Lease) int64 {
	return Now() + int64(time.Until(l.SafeUntil()))
}

func (w *workerState) sleep(min, max time.Duration) {
	time.Sleep(min + time.Duration(w.rng.Int64N(int64(max-min)+1)))
}

// cycle is one acquire, write, release.
func (w *workerState) cycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	acq := Record{Kind: Invoke, Op: base + "-a", Type: OpAcquire, Resource: res, RequestID: RequestIDOf(base + "-a")}
	w.emit(acq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	lease, err := w.leases.Acquire(ctx, res, client.WithTTL(w.cfg.TTL), client.WithHolder(w.cfg.ID), client.WithRequestID(acq.RequestID))
	cancel()
	done := acq
	done.Kind, done.TimeNs = Complete, 0
	if err != nil {
		done.Result, done.Error = acquireOutcome(err), acquireError(err)
		w.emit(done)
		w.sleep(10*time.Millisecond, 80*time.Millisecond)
		return
	}
	tok := fence.TokenOf(lease)
	done.Result, done.Token, done.Lease, done.SafeUntilNs = OK, tok.Value, lease.ID().String(), safeUntilNs(lease)
	w.emit(done)

	w.write(base, res, lease, tok)

	// Sometimes hold the lease past a keep-alive renewal.
	if w.rng.IntN(10) == 0 {
		w.sleep(w.cfg.TTL/2, w.cfg.TTL)
	} else {
		w.sleep(0, 30*time.Millisecond)
	}

	rel := Record{Kind: Invoke, Op: base + "-r", Type: OpRelease, Resource: res, Token: tok.Value, Lease: lease.ID().String(), SafeUntilNs: safeUntilNs(lease)}
	w.emit(rel)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	err = lease.Release(ctx)
	cancel()
	rdone := rel
	rdone.Kind, rdone.TimeNs, rdone.SafeUntilNs = Complete, 0, 0
	if err != nil {
		rdone.Result, rdone.Error = Unknown, err.Error()
	} else {
		rdone.Result = OK
	}
	w.emit(rdone)
	w.sleep(0, 20*time.Millisecond)
}

// write appends a unique element to the resource's key as a fenced
// read-modify-write: a claim (an empty fenced append, which raises the
// key's highest token to ours before we read), a read, then a fenced put
// of the value read plus the element. With fencing, a put by a holder
// whose lease has moved on is refused, because the newer holder's claim
// came before the newer holder's read; without fencing the stale put
// overwrites, and the newer holder's elements are lost.
func (w *workerState) write(base, res string, lease *client.Lease, tok fence.Token) {
	elem := base
	inv := Record{Kind: Invoke, Op: base + "-w", Type: OpWrite, Resource: res, Element: elem, Token: tok.Value, Lease: lease.ID().String(), SafeUntilNs: safeUntilNs(lease)}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs, done.SafeUntilNs = Complete, 0, 0
	finish := func(result string, err error) {
		done.Result = result
		if err != nil {
			done.Error = err.Error()
		}
		done.SafeUntilNs = safeUntilNs(lease)
		w.emit(done)
	}
	// A careful worker: never start a write on a lease that has run out.
	if err := lease.Err(); err != nil {
		finish(Fail, fmt.Errorf("not sent: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.kv.Append(ctx, res, tok, nil); err != nil {
		finish(Fail, fmt.Errorf("claim failed, element not sent: %w", err))
		return
	}
	old, _, err := w.kv.Get(ctx, res)
	if err != nil && !errors.Is(err, fencekv.ErrNotFound) {
		finish(Fail, fmt.Errorf("read failed, element not sent: %w", err))
		return
	}
	if w.pause.Swap(false) {
		b, _ := json.Marshal(PauseNotice{Worker: w.cfg.ID, Op: inv.Op, Resource: res, Token: tok.Value})
		w.mu.Lock()
		fmt.Fprintf(w.out, "%s%s\n", PausingPrefix, b)
		w.mu.Unlock()
		if err := stopSelf(); err != nil {
			finish(Fail, fmt.Errorf("SIGSTOP failed, element not sent: %w", err))
			return
		}
		// Resumed by SIGCONT, our read and our lease check long out of date.
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
	}
	value := strings.TrimSpace(string(old) + ElementSep + elem)
	_, err = w.kv.Put(ctx, res, tok, []byte(value))
	switch {
	case err == nil:
		finish(OK, nil)
	case errors.Is(err, fencekv.ErrIndeterminate):
		finish(Unknown, err)
	default:
		finish(Fail, err)
	}
}

// RequestIDOf is the request id an acquire is sent with: its op id, which
// is unique within a run (every run starts with empty data dirs).
func RequestIDOf(op string) string { return "jepsen/" + op }

// HeldPrefix starts the Error of an acquire refused because the resource
// was held.
const HeldPrefix = "held: "

func acquireError(err error) string {
	if errors.Is(err, client.ErrHeld) {
		return HeldPrefix + err.Error()
	}
	return err.Error()
}

// linCycle is one round of the linearizability workload: acquire (no
// wait), sometimes read, release, read. Leases live longer than the run,
// so expiry never enters the model.
func (w *workerState) linCycle() {
	res := w.cfg.Resources[w.rng.IntN(len(w.cfg.Resources))]
	base := fmt.Sprintf("%s-%d", w.cfg.ID, w.n)
	acq := Record{Kind: Invoke, Op: base + "-a", Type: OpAcquire, Resource: res, RequestID: RequestIDOf(base + "-a")}
	w.emit(acq)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	lease, err := w.leases.Acquire(ctx, res, client.WithTTL(w.cfg.TTL), client.WithHolder(w.cfg.ID), client.WithRequestID(acq.RequestID))
	cancel()
	done := acq
	done.Kind, done.TimeNs = Complete, 0
	if err != nil {
		done.Result, done.Error = acquireOutcome(err), acquireError(err)
		w.emit(done)
		w.linRead(base+"-g", res)
		w.sleep(5*time.Millisecond, 40*time.Millisecond)
		return
	}
	done.Result, done.Token, done.Lease, done.SafeUntilNs = OK, lease.Token(), lease.ID().String(), safeUntilNs(lease)
	w.emit(done)
	if w.rng.IntN(2) == 0 {
		w.linRead(base+"-h", res)
	}
	if w.rng.IntN(2) == 0 {
		w.renew(base+"-n", res, lease.ID(), lease.Token())
	}
	w.sleep(0, 50*time.Millisecond)
	rel := Record{Kind: Invoke, Op: base + "-r", Type: OpRelease, Resource: res, Token: lease.Token(), Lease: lease.ID().String(), SafeUntilNs: safeUntilNs(lease)}
	w.emit(rel)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	err = lease.Release(ctx)
	cancel()
	rdone := rel
	rdone.Kind, rdone.TimeNs, rdone.SafeUntilNs = Complete, 0, 0
	if err != nil {
		rdone.Result, rdone.Error = Unknown, err.Error()
	} else {
		rdone.Result = OK
	}
	w.emit(rdone)
	w.linRead(base+"-g", res)
	w.sleep(10*time.Millisecond, 60*time.Millisecond)
}

// renew renews a lease with an explicit Renew call (the client library
// renews through its keep-alive stream, which the history does not see):
// ok, fail (NotFound: the lease is gone) or unknown. It goes straight to
// the API, trying each node in turn (followers forward to the leader).
func (w *workerState) renew(op, res string, id client.ID, token uint64) {
	inv := Record{Kind: Invoke, Op: op, Type: OpRenew, Resource: res, Lease: id.String(), Token: token}
	w.emit(inv)
	done := inv
	done.Kind, done.TimeNs = Complete, 0
	done.Result = Unknown
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 20 && time.Now().Before(deadline); i++ {
		conn := w.conn(i % len(w.cfg.Endpoints))
		if conn == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := api.NewLeaseServiceClient(conn).Renew(ctx, &api.RenewRequest{LeaseId: id[:]})
		cancel()
		if err == nil {
			done.Result, done.Error = OK, ""
			break
		}
		if status.Code(err) == codes.NotFound {
			done.Result, done.Error = Fail, err.Error()
			break
		}
		done.Error = err.Error()
		time.Sleep(50 * time.Millisecond)
	}
	w.emit(done)
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
	inv := Record{Kind: Invoke, Op: op, Type: OpRead, Resource: res}
	w.emit(inv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	g, err := w.leases.Get(ctx, res)
	cancel()
	done := inv
	done.Kind, done.TimeNs = Complete, 0
	if err != nil {
		done.Result, done.Error = Unknown, err.Error()
	} else {
		done.Result, done.Token = OK, g.ScopeToken
		if g.Lease != nil {
			done.Lease = g.Lease.ID.String()
		}
	}
	w.emit(done)
}

// acquireOutcome classifies a failed Acquire: refused (fail) or possibly
// granted (unknown).
func acquireOutcome(err error) string {
	switch {
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrInvalidArgument):
		return Fail
	case errors.Is(err, client.ErrLeaseLost):
		return Fail
	}
	return Unknown
}

// stopSelf stops the whole process with a thread-directed SIGSTOP, taken
// before the system call returns (see internal/demo).
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
