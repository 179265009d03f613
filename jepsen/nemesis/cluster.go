package nemesis

import (
	"context"
	"syscall"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/netns"
)

// NodeControl is what every process nemesis needs from the cluster under
// test: its nodes, its leader, and kill/restart/pause/resume of one node.
// How a fault is realised (a signal to a child process, a container
// runtime) is the implementation's business.
type NodeControl interface {
	// Nodes returns node ids in a stable order.
	Nodes() []string
	// Leader returns the id of a node that reports itself leader, or "".
	Leader(ctx context.Context) string
	// Kill9 kills node id with SIGKILL; Restart starts it again from its
	// data dir.
	Kill9(id string) error
	Restart(id string) error
	// Pause stops node id with SIGSTOP and reports whether it was seen
	// stopped; Resume continues it.
	Pause(id string) (bool, error)
	Resume(id string) error
}

// Cluster is what the nemeses that reach past NodeControl need: the
// storage, membership and restore nemeses, and the rolling restart's
// graceful stop. A nemesis given a NodeControl that is not a Cluster
// records that it did nothing.
type Cluster interface {
	NodeControl
	Status
	Processes
	Storage
	Members
}

// Status reads the nodes' own view of the cluster.
type Status interface {
	// Status asks node id for its status.
	Status(ctx context.Context, id string) (*api.StatusResponse, error)
	// NodeStates asks every running, unpaused node for its status.
	NodeStates(ctx context.Context) map[string]*api.StatusResponse
	// Endpoints returns every node's client address.
	Endpoints() []string
}

// Processes hands out node processes, for what NodeControl does not do:
// a graceful stop, a start on changed storage, reading the node's log.
type Processes interface {
	Process(id string) Process
}

// Process is one node's process.
type Process interface {
	// Start starts it with its arguments.
	Start() error
	// Kill sends sig (and SIGCONT) and waits up to timeout for the exit,
	// then SIGKILLs.
	Kill(sig syscall.Signal, timeout time.Duration)
	// Exited is closed once the process has exited.
	Exited() <-chan struct{}
	// Tail returns the last n bytes of its log.
	Tail(n int) string
}

// Storage is the nodes' storage: data dirs, backups and restores.
type Storage interface {
	// Dir holds every node's data dir; nemeses keep backups and set-aside
	// data there.
	Dir() string
	// DataDir returns node id's data dir.
	DataDir(id string) string
	// Backup writes a backup of the cluster (ClusterService.Snapshot) to
	// path and returns the Raft index it reflects.
	Backup(ctx context.Context, path string) (uint64, error)
	// RestoreAll loses the whole cluster and starts a new one from
	// backup: every node killed, its data dir moved under lostDir, all
	// bootstrapped again with --restore backup; it waits up to 30 s for a
	// leader. A non-empty odd names a node restored with an epoch
	// MismatchEpochSkew seconds later and started 2 s before the others
	// (restore-mismatch).
	RestoreAll(ctx context.Context, backup, lostDir, odd string) error
	// Refound repairs node id of a restored cluster: stopped, its data
	// dir moved to lostDir, started again from backup with the default
	// bump.
	Refound(ctx context.Context, id, backup, lostDir string) error
}

// Members changes the Raft configuration through the leader.
type Members interface {
	// RemoveMember asks the leader to remove node id (ten tries).
	RemoveMember(ctx context.Context, id string) error
	// RemoveBounded asks the leader to remove member id: three tries of
	// 5 s; a member the leader does not know counts as removed.
	RemoveBounded(ctx context.Context, id string) error
	// Join asks the leader to add a voter id at addr.
	Join(ctx context.Context, id, addr string) error
	// Rejoin starts node id again from an empty data dir, joining through
	// a running node instead of bootstrapping.
	Rejoin(ctx context.Context, id string) error
	// Founders returns the ids of the --bootstrap list the cluster was
	// founded with.
	Founders() []string
	// RestartFounder starts founder id again on its address and data dir
	// with the --bootstrap list the cluster was founded with instead of
	// --join: the command line it first ran with.
	RestartFounder(id string) error
	// WaitMembers waits up to 20 s until the leader lists want members
	// and id is (present) or is not (!present) among them.
	WaitMembers(ctx context.Context, want int, id string, present bool) bool
	// WaitCaughtUp waits up to 20 s until node id has applied what the
	// leader had committed when the wait began.
	WaitCaughtUp(ctx context.Context, id string) bool
	// FreeAddrs picks n loopback addresses nothing listens on now (for
	// members that cannot be reached).
	FreeAddrs(n int) ([]string, error)
}

// Worker is one fenced worker process, as the client-pause nemeses use
// it: ask it to stop itself at a point of its protocol, see it stopped,
// resume it.
type Worker interface {
	// ID is the worker's id (w1, w2, ...).
	ID() string
	// Running reports whether the process runs.
	Running() bool
	// PauseAt asks the worker to stop itself at the point kind names
	// (history.NemClientPause: its next write; NemClientPauseAcquire: the
	// answer to its next acquire; NemClientPauseReplay: the write after a
	// replayed acquire).
	PauseAt(kind string) error
	// Paused delivers what the worker said before it stopped itself.
	Paused() <-chan PauseNotice
	// WaitStopped waits up to timeout until the process is seen stopped.
	WaitStopped(timeout time.Duration) bool
	// Resume continues it (SIGCONT).
	Resume() error
}

// PauseNotice is what a worker says before it stops itself.
type PauseNotice struct {
	Worker   string `json:"worker"`
	Op       string `json:"op"`
	Resource string `json:"resource"`
	Token    uint64 `json:"token"`
}

// Net is what the network nemeses need: node↔node faults (the top-level
// Net, over a proxy, namespaces or containers, satisfies it). A Net that
// also has Silence(id string, on bool) error can make one node mute
// (silent-leader); without it silent-leader partitions the node away.
type Net interface {
	// Partition makes grudge[b] the nodes b does not receive from; an
	// empty grudge heals partitions only.
	Partition(grudge map[string][]string) error
	// Slow delays traffic on every link by delay plus a uniform jitter in
	// [0, jitter). Zero delay and jitter end it.
	Slow(delay, jitter time.Duration) error
	// Flaky makes every link unreliable with probability p. Zero ends it.
	Flaky(p float64) error
	// Heal removes every partition, delay and flakiness.
	Heal() error
	// Describe says how the current faults are realised.
	Describe() string
	// Stats says what the faults did to traffic so far.
	Stats() netns.Stats
}

// ClockControl is what the clock nemeses need from the cluster: set a
// node's fault clock, and read back what the node reports it runs at.
type ClockControl interface {
	SetClock(id string, rate float64, wallOffset time.Duration) error
	ClockStatus(ctx context.Context, id string) (rate float64, wallOffset time.Duration, err error)
}
