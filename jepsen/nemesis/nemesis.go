// Package nemesis injects the harness's faults: the loop that picks one
// fault at a time on a seeded schedule (Nemesis.Run) and every fault kind
// of history's Nem* vocabulary, each recorded as a start and a heal in
// nemesis.jsonl. It knows the cluster only through the interfaces it
// declares (cluster.go): NodeControl for processes, Cluster for storage,
// members and restores, Net for the network, ClockControl for the fault
// clocks and Worker for the client pauses; the top-level jepsen package
// implements them.
package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasefence/leasefence/fence/fencekv"
	"github.com/leasefence/leasefence/jepsen/history"
)

// AllNemeses lists every kind implemented: the process nemeses above,
// snapshot and member (state.go), storage (storage.go), lost-voter
// (lostvoter.go),
// member-unreachable (membership.go), the
// network ones (NetNemeses, net.go; silent-leader, silent.go),
// the combined ones (ComboNemeses and lose-tail, combo.go), the clock ones
// (clock.go), restore (restore.go) and slow-disk (slowdisk.go). "all"
// means every one in spec (InSpecNemeses): clock-rate, beyond the drift
// bound, and restore, which loses acknowledged state by design, must be
// named, as must slow-disk, which puts the run's data dirs on a FUSE
// mount.
var AllNemeses = slices.Concat(
	[]string{history.NemKill, history.NemKillLeader, history.NemPause, history.NemPauseLeader, history.NemClientPause, history.NemClientPauseAcquire, history.NemClientPauseReplay, history.NemSnapshot, history.NemMember, history.NemStorage, history.NemMemberUnreachable, history.NemLostVoter},
	NetNemeses, []string{history.NemSilentLeader}, ComboNemeses, []string{history.NemLoseTail},
	[]string{history.NemClockBump, history.NemClockStrobe, history.NemClockRate, history.NemClockRateClientPause, history.NemClockDriftEdge, history.NemClockDriftEdgeCoarse, history.NemRestore, history.NemRestoreMismatch, history.NemRestoreAgain, history.NemSlowDisk})

// InSpecNemeses is AllNemeses without the out-of-spec clock-rate and
// restore, without clock-drift-edge and clock-drift-edge-coarse, which
// are in spec but set up the whole run (driftedge.go), and without
// lose-tail, in spec but undecidable for the watch-based checkers: every
// node that serves during it has restored a snapshot past the watcher's
// position, so the stream has gaps (combo.go), and without slow-disk, in
// spec but a FUSE mount under the whole run (slowdisk.go).
func InSpecNemeses() []string {
	var out []string
	for _, k := range AllNemeses {
		if k != history.NemClockRate && k != history.NemClockRateClientPause && !history.IsDriftEdge(k) && !history.IsRestore(k) && k != history.NemLoseTail && k != history.NemSlowDisk {
			out = append(out, k)
		}
	}
	return out
}

// ParseNemeses parses a comma-separated list ("all" and "none" allowed).
func ParseNemeses(s string) ([]string, error) {
	switch s {
	case "all":
		return append([]string(nil), InSpecNemeses()...), nil
	case "", "none":
		return nil, nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		ok := false
		for _, a := range AllNemeses {
			ok = ok || a == k
		}
		if !ok {
			return nil, fmt.Errorf("unknown nemesis %q (have %s)", k, strings.Join(AllNemeses, ","))
		}
		out = append(out, k)
	}
	return out, nil
}

// Config is what a Nemesis works on.
type Config struct {
	// Kinds are the enabled fault kinds (history.Nem*; ParseNemeses).
	Kinds []string
	// Rng is the run's seeded source: which kind, which node, how long.
	Rng   *rand.Rand
	Nodes NodeControl // a Cluster for the nemeses that need one
	// Clocks sets the nodes' fault clocks; nil unless a clock nemesis is
	// enabled (clock.go).
	Clocks ClockControl
	// Net injects network faults (net.go); nil: none.
	Net Net
	// Disk slows the nodes' fsyncs (slowdisk.go); nil unless slow-disk is
	// enabled.
	Disk SlowDisk
	// Workers are the fenced workers the client pauses stop.
	Workers []Worker
	// KV is the fenced store: the client pauses read the highest accepted
	// token there, the restore probe writes through it.
	KV  *fencekv.Client
	TTL time.Duration
	// ResourcePrefix starts every resource the workers lease: the storage
	// nemesis corrupts an entry naming one.
	ResourcePrefix string
	// Log receives nemesis.jsonl.
	Log *history.Writer
	// Hist is the run's history, where the restore probe records its
	// operations (nil: no restore probe).
	Hist *history.Writer
	// OnRestore is called once a cluster restored from a backup serves
	// (the watcher starts afresh on it).
	OnRestore func()
	// Progress prints a line for the person watching.
	Progress func(string)
}

// New returns a Nemesis over c.
func New(c Config) *Nemesis {
	return &Nemesis{kinds: append([]string(nil), c.Kinds...), rng: c.Rng, nodes: c.Nodes, clocks: c.Clocks, net: c.Net, disk: c.Disk,
		workers: c.Workers, kv: c.KV, ttl: c.TTL, resourcePrefix: c.ResourcePrefix, log: c.Log, hist: c.Hist,
		onRestore: c.OnRestore, progress: c.Progress, counts: map[string]int{}, effect: map[string]int{}}
}

// Nemesis injects one fault at a time on a seeded schedule, records each
// start and heal in nemesis.jsonl, and heals everything before it returns.
type Nemesis struct {
	kinds          []string
	rng            *rand.Rand
	nodes          NodeControl
	clocks         ClockControl // nil unless a clock nemesis is enabled (clock.go)
	net            Net          // network faults (net.go); nil: none
	disk           SlowDisk     // the nodes' slow disk (slowdisk.go); nil: none
	workers        []Worker
	kv             *fencekv.Client
	ttl            time.Duration
	resourcePrefix string
	log            *history.Writer
	// hist is the run's history, where the restore probe records its
	// operations (nil: no restore probe).
	hist *history.Writer
	// onRestore is called once a cluster restored from a backup serves
	// (the watcher starts afresh on it).
	onRestore func()
	progress  func(string)
	// againFrom is the backup NemRestoreAgain restores from: taken at its
	// first fault, restored again at every later one.
	againFrom string
	// againScopes are the probe's scopes of the restores from againFrom:
	// a later restore of the file probes them too.
	againScopes []string
	// lostVoters counts the lost-voter faults injected so far: which
	// start the next one uses (lostVoterVia).
	lostVoters int

	mu     sync.Mutex
	counts map[string]int // started faults by kind
	effect map[string]int // faults verified effective by kind
}

// faultRecorder is where faults are recorded.
func (n *Nemesis) record(f history.Fault) {
	if f.TimeNs == 0 {
		f.TimeNs = history.Now()
	}
	_ = n.log.Write(f)
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.Phase == "start" {
		n.counts[f.Kind]++
	}
	if f.Phase == "heal" && f.Effective {
		n.effect[f.Kind]++
	}
}

// Run injects faults until ctx ends: wait 1–3 s, take the next kind (each
// enabled kind once per round, rounds shuffled by the seed), hold the
// fault 1–4 s (client pause: until the lease moved on), heal. Bounded by
// ctx and by a fault count.
func (n *Nemesis) Run(ctx context.Context) {
	if len(n.kinds) == 0 {
		<-ctx.Done() // the workload still runs its full time
		return
	}
	for i := 0; i < 10000; i++ {
		wait := time.Second + time.Duration(n.rng.Int64N(int64(2*time.Second)))
		if i == 0 {
			wait += 2 * time.Second // a fault-free start, for the run to be meaningful
		}
		if !sleepCtx(ctx, wait) {
			return
		}
		// Every enabled kind once per round, in a seeded order.
		if i%len(n.kinds) == 0 {
			n.rng.Shuffle(len(n.kinds), func(a, b int) { n.kinds[a], n.kinds[b] = n.kinds[b], n.kinds[a] })
		}
		kind := n.kinds[i%len(n.kinds)]
		hold := time.Second + time.Duration(n.rng.Int64N(int64(3*time.Second)))
		switch kind {
		case history.NemKill, history.NemKillLeader:
			n.kill(ctx, kind, hold)
		case history.NemPause, history.NemPauseLeader:
			n.pause(ctx, kind, hold)
		case history.NemClientPause, history.NemClientPauseAcquire, history.NemClientPauseReplay:
			n.clientPause(ctx, kind)
		case history.NemClockRateClientPause:
			n.clockRateClientPause(ctx)
		case history.NemClockDriftEdge, history.NemClockDriftEdgeCoarse:
			n.clockDriftEdge(ctx, kind)
		case history.NemSnapshot:
			n.snapshot(ctx, hold)
		case history.NemMember:
			n.member(ctx, hold)
		case history.NemKillMinority:
			n.killMinority(ctx, hold)
		case history.NemRollingRestart:
			n.rollingRestart(ctx)
		case history.NemPartitionKill:
			n.partitionKill(ctx, hold)
		case history.NemLoseTail:
			n.loseTail(ctx, hold)
		case history.NemStorage:
			n.storage(ctx, hold)
		case history.NemLostVoter:
			n.lostVoter(ctx, hold)
		case history.NemMemberUnreachable:
			n.memberUnreachable(ctx, hold)
		case history.NemSilentLeader:
			n.silentLeader(ctx, hold)
		case history.NemSlowDisk:
			n.slowDisk(ctx)
		case history.NemClockBump:
			n.clockBump(ctx, hold)
		case history.NemClockStrobe:
			n.clockStrobe(ctx, hold)
		case history.NemClockRate:
			n.clockRate(ctx, hold)
		case history.NemRestore, history.NemRestoreMismatch, history.NemRestoreAgain:
			n.restore(ctx, kind)
		default:
			if isNetNemesis(kind) {
				n.netFault(ctx, kind, hold)
			}
		}
	}
}

// notDone records a fault of kind that could not be injected: why, and a
// heal that did nothing.
func (n *Nemesis) notDone(kind, why string) {
	n.record(history.Fault{Phase: "start", Kind: kind, Detail: why})
	n.record(history.Fault{Phase: "heal", Kind: kind, Detail: "nothing done"})
}

// clusterFollower returns the cluster of processes and a follower, for a
// fault of kind done to one; without either it records the fault as not
// done (why) and returns false.
func (n *Nemesis) clusterFollower(ctx context.Context, kind, why string) (Cluster, string, bool) {
	cl, ok := n.nodes.(Cluster)
	id, found := n.follower(ctx)
	if !ok || !found {
		n.notDone(kind, why)
		return nil, "", false
	}
	return cl, id, true
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

// target picks a node: the leader for the *-leader kinds (a random node if
// none is known), otherwise a random node.
func (n *Nemesis) target(ctx context.Context, kind string) (string, bool) {
	leader := n.nodes.Leader(ctx)
	if strings.HasSuffix(kind, "-leader") && leader != "" {
		return leader, true
	}
	ids := n.nodes.Nodes()
	id := ids[n.rng.IntN(len(ids))]
	return id, id == leader
}

func (n *Nemesis) kill(ctx context.Context, kind string, hold time.Duration) {
	id, isLeader := n.target(ctx, kind)
	n.progress(fmt.Sprintf("nemesis: kill -9 %s%s", id, leaderMark(isLeader)))
	err := n.nodes.Kill9(id)
	n.record(history.Fault{Phase: "start", Kind: kind, Target: id, Leader: isLeader, Detail: errString(err, "SIGKILL")})
	sleepCtx(context.WithoutCancel(ctx), hold) // always heal
	rerr := n.nodes.Restart(id)
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: id, Effective: err == nil, Detail: errString(rerr, "restarted from its data dir")})
}

func (n *Nemesis) pause(ctx context.Context, kind string, hold time.Duration) {
	id, isLeader := n.target(ctx, kind)
	n.progress(fmt.Sprintf("nemesis: SIGSTOP %s%s", id, leaderMark(isLeader)))
	stopped, err := n.nodes.Pause(id)
	n.record(history.Fault{Phase: "start", Kind: kind, Target: id, Leader: isLeader, Detail: errString(err, fmt.Sprintf("SIGSTOP, seen stopped: %v", stopped))})
	sleepCtx(context.WithoutCancel(ctx), hold)
	rerr := n.nodes.Resume(id)
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: id, Effective: stopped, Detail: errString(rerr, "SIGCONT")})
}

func leaderMark(leader bool) string {
	if leader {
		return " (the leader)"
	}
	return ""
}

func errString(err error, ok string) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}

// clientPause asks a random worker to stop itself: for client-pause at its
// next write (after its grant, claim and read), for client-pause-acquire
// when the answer to its next acquire has arrived, before its client
// library sees it, for client-pause-replay at the write of its next
// acquire whose first answer was lost (CmdPauseReplay). It waits until the worker is stopped, then until the
// resource's highest accepted token at fencedkv is above the paused
// worker's (someone else got a newer lease and wrote), and resumes it. The
// wait is bounded: at most 8 ttl. It reports whether the pause was
// effective.
func (n *Nemesis) clientPause(ctx context.Context, kind string) bool {
	var idle []Worker
	for _, w := range n.workers {
		if w.Running() {
			idle = append(idle, w)
		}
	}
	if len(idle) == 0 {
		return false
	}
	w := idle[n.rng.IntN(len(idle))]
	// Drop a stale notice from an earlier pause, if any.
	select {
	case <-w.Paused():
	default:
	}
	where := "write"
	switch kind {
	case history.NemClientPauseAcquire:
		where = "acquire answer"
	case history.NemClientPauseReplay:
		where = "write after a replayed acquire"
	}
	if err := w.PauseAt(kind); err != nil {
		return false
	}
	var note PauseNotice
	select {
	case note = <-w.Paused():
	case <-time.After(10 * time.Second):
		n.record(history.Fault{Phase: "start", Kind: kind, Target: w.ID(), Detail: "worker did not reach a " + where + " within 10s"})
		n.record(history.Fault{Phase: "heal", Kind: kind, Target: w.ID(), Detail: "never paused"})
		return false
	case <-ctx.Done():
		return false
	}
	stopped := w.WaitStopped(5 * time.Second)
	n.progress(fmt.Sprintf("nemesis: %s frozen at its %s with token %d on %s", w.ID(), where, note.Token, note.Resource))
	n.record(history.Fault{Phase: "start", Kind: kind, Target: w.ID(),
		Detail: fmt.Sprintf("SIGSTOP at %s %s on %s with token %d, seen stopped: %v", where, note.Op, note.Resource, note.Token, stopped)})
	// A worker stopped before its write resumes once the newer holder's
	// write has landed (its stale write comes after it); one stopped at an
	// acquire answer resumes at once, while the newer holder (whose claim
	// was just seen) still holds: a window the late answer must not
	// overlap.
	settle, poll := 200*time.Millisecond, 50*time.Millisecond
	if kind == history.NemClientPauseAcquire {
		settle, poll = 0, 10*time.Millisecond
	}
	deadline := time.Now().Add(8 * n.ttl)
	var highest uint64
	for time.Now().Before(deadline) {
		qctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h, err := n.kv.Highest(qctx, note.Resource)
		cancel()
		if err == nil && h > note.Token {
			highest = h
			time.Sleep(settle)
			break
		}
		time.Sleep(poll)
	}
	err := w.Resume()
	detail := fmt.Sprintf("SIGCONT; a newer token %d was accepted meanwhile", highest)
	if highest == 0 {
		detail = "SIGCONT; no newer token was accepted within 8 ttl"
	}
	n.record(history.Fault{Phase: "heal", Kind: kind, Target: w.ID(), Effective: stopped && highest > note.Token, Detail: errString(err, detail)})
	return stopped && highest > note.Token
}

// Counts returns the started and verified-effective faults by kind.
func (n *Nemesis) Counts() (map[string]int, map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, e := map[string]int{}, map[string]int{}
	for k, v := range n.counts {
		c[k] = v
	}
	for k, v := range n.effect {
		e[k] = v
	}
	return c, e
}
