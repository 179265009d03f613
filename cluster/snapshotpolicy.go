package cluster

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// snapshotPolicy scales raft's snapshot threshold with the size of the
// state. A snapshot costs time in proportion to the state (a million
// leases: ~230 MB, seconds of CPU), while a fixed threshold takes one every
// SnapshotThreshold entries: at a million leases and a fixed 16 384, the
// node would spend a large share of a core writing snapshots, and the
// acquires that share its CPU and disk wait. So the threshold is raised
// until the log written between two snapshots is about half a snapshot's
// size: the cost of snapshots per applied byte then stays the same at any
// number of leases, and a restart replays at most that much log on top of
// the snapshot. Config.SnapshotThreshold is the least,
// Config.SnapshotThresholdMax (by default 64 times it) the most.
type snapshotPolicy struct {
	configured, limit uint64

	// size is the byte size of the last snapshot this node wrote or
	// restored (0: none yet). avg is the moving average size of the
	// command entries applied (float64 bits; written only by the apply
	// goroutine), entries how many were applied since start.
	size    atomic.Int64
	avg     atomic.Uint64
	entries atomic.Uint64

	current atomic.Uint64 // the threshold raft has now
}

// snapshotThresholdScale is how far above the configured threshold the
// policy may go by default.
const snapshotThresholdScale = 64

func newSnapshotPolicy(configured, limit uint64) *snapshotPolicy {
	p := &snapshotPolicy{configured: configured, limit: max(limit, configured)}
	p.current.Store(configured)
	return p
}

// applied counts one command entry of n bytes. Only the apply goroutine
// calls it.
func (p *snapshotPolicy) applied(n int) {
	avg := float64(n)
	if p.entries.Add(1) > 1 {
		// Over roughly the last thousand entries.
		avg = math.Float64frombits(p.avg.Load())*(1-1.0/1024) + float64(n)/1024
	}
	p.avg.Store(math.Float64bits(avg))
}

// sized records the byte size of the snapshot just written or restored.
func (p *snapshotPolicy) sized(n int64) { p.size.Store(n) }

// threshold returns the threshold for the state now, and false while too
// few entries have been applied since start to tell their usual size.
func (p *snapshotPolicy) threshold() (uint64, bool) {
	return scaledThreshold(p.configured, p.limit, p.size.Load(), math.Float64frombits(p.avg.Load()), p.entries.Load())
}

// scaledThreshold is the policy's arithmetic: the number of entries of
// the recent average size avg that make half a snapshot of snapshotBytes,
// kept within [least, most].
func scaledThreshold(least, most uint64, snapshotBytes int64, avg float64, entries uint64) (uint64, bool) {
	if snapshotBytes <= 0 || entries < 256 {
		return 0, false
	}
	t := float64(snapshotBytes) / (2 * max(avg, 1))
	return min(max(uint64(t), least), most), true
}

// run re-reads the policy every interval and hands raft a threshold that
// moved by more than a tenth, until stop is closed.
func (p *snapshotPolicy) run(n *Node, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		want, ok := p.threshold()
		cur := p.current.Load()
		if !ok || (want*10 > cur*9 && want*10 < cur*11) {
			continue
		}
		cfg := n.cfg
		err := n.raft.ReloadConfig(raft.ReloadableConfig{
			TrailingLogs:      cfg.TrailingLogs,
			SnapshotInterval:  cfg.SnapshotInterval,
			SnapshotThreshold: want,
			HeartbeatTimeout:  cfg.HeartbeatTimeout,
			ElectionTimeout:   cfg.ElectionTimeout,
		})
		if err != nil {
			n.log.Warn("cannot change the snapshot threshold", "threshold", want, "error", err)
			continue
		}
		p.current.Store(want)
		n.log.Debug("snapshot threshold changed", "from", cur, "to", want, "snapshot-bytes", p.size.Load())
	}
}
