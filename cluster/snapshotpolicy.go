package cluster

import (
	"math"
	"sync/atomic"
	"time"
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
//
// The policy keeps only what raft does not: the sizes of the entries
// applied. The snapshot's size comes from raft's snapshot store, the
// threshold in force from raft's config.
type snapshotPolicy struct {
	configured, limit uint64
	// trailing is Config.TrailingLogs: raised with the threshold in the
	// same proportion, so that the log kept after a snapshot still
	// reaches back to the previous one (Config.TrailingLogs).
	trailing uint64

	// avg is the moving average size of the command entries applied
	// (float64 bits; written only by the apply goroutine), entries how
	// many were applied since start.
	avg     atomic.Uint64
	entries atomic.Uint64
}

// snapshotThresholdScale is how far above the configured threshold the
// policy may go by default.
const snapshotThresholdScale = 64

func newSnapshotPolicy(configured, limit, trailing uint64) *snapshotPolicy {
	return &snapshotPolicy{configured: configured, limit: max(limit, configured), trailing: trailing}
}

// trailingFor returns the trailing logs to keep with threshold t: the
// configured ratio of trailing logs to threshold, never below the
// configured trailing logs.
func (p *snapshotPolicy) trailingFor(t uint64) uint64 {
	if p.configured == 0 || t <= p.configured {
		return p.trailing
	}
	return max(p.trailing, uint64(float64(t)*float64(p.trailing)/float64(p.configured)))
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

// threshold returns the threshold for a state whose last snapshot took
// snapshotBytes, and false while too few entries have been applied since
// start to tell their usual size.
func (p *snapshotPolicy) threshold(snapshotBytes int64) (uint64, bool) {
	return scaledThreshold(p.configured, p.limit, snapshotBytes, math.Float64frombits(p.avg.Load()), p.entries.Load())
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
		size := n.lastSnapshotBytes()
		want, ok := p.threshold(size)
		n.reloadMu.Lock()
		rc := n.raft.ReloadableConfig()
		cur := rc.SnapshotThreshold
		if !ok || (want*10 > cur*9 && want*10 < cur*11) {
			n.reloadMu.Unlock()
			continue
		}
		rc.SnapshotThreshold = want
		rc.TrailingLogs = p.trailingFor(want)
		err := n.raft.ReloadConfig(rc)
		n.reloadMu.Unlock()
		if err != nil {
			n.log.Warn("cannot change the snapshot threshold", "threshold", want, "error", err)
			continue
		}
		n.log.Debug("snapshot threshold changed", "from", cur, "to", want, "trailing-logs", rc.TrailingLogs, "snapshot-bytes", size)
	}
}

// lastSnapshotBytes returns the size of the newest snapshot in this node's
// snapshot store (written here or installed from the leader), 0 when none.
func (n *Node) lastSnapshotBytes() int64 {
	metas, err := n.snapStore.List()
	if err != nil || len(metas) == 0 {
		return 0
	}
	return metas[0].Size
}
