package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestScaledThreshold(t *testing.T) {
	for _, tc := range []struct {
		snapshot int64
		avg      float64
		entries  uint64
		want     uint64
		ok       bool
	}{
		{snapshot: 0, avg: 100, entries: 10000, ok: false},                   // no snapshot yet
		{snapshot: 1 << 20, avg: 100, entries: 255, ok: false},               // too few entries to tell
		{snapshot: 1 << 20, avg: 200, entries: 10000, want: 16384, ok: true}, // small state: the configured floor
		// 230 MB of state, 150 B entries: 766 666 entries of log make half a snapshot.
		{snapshot: 230e6, avg: 150, entries: 10000, want: 766666, ok: true},
		// The same state, 8 KB batch entries: 14 037, under the floor.
		{snapshot: 230e6, avg: 8192, entries: 1000, want: 16384, ok: true},
		{snapshot: 2.3e9, avg: 150, entries: 1000, want: 16384 * 64, ok: true}, // the ceiling
		{snapshot: 1 << 30, avg: 0, entries: 1000, want: 16384 * 64, ok: true}, // empty entries: no division by zero
	} {
		got, ok := scaledThreshold(16384, 16384*64, tc.snapshot, tc.avg, tc.entries)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("scaledThreshold(snapshot %d, entries of %.0f B, %d of them) = %d, %v; want %d, %v", tc.snapshot, tc.avg, tc.entries, got, ok, tc.want, tc.ok)
		}
	}
	// The moving average follows the entries' size.
	p := newSnapshotPolicy(16384, 16384*64, 32768)
	for i := 0; i < 20000; i++ {
		n := 8192
		if i >= 10000 {
			n = 150
		}
		p.applied(n)
	}
	if got, ok := p.threshold(230e6); !ok || got < 700000 || got > 800000 {
		t.Errorf("after 10 000 entries of 8 KB then 10 000 of 150 B, threshold %d, %v; want ~766 666", got, ok)
	}
}

// TestSnapshotThresholdGrowsWithTheState: with many leases and small
// entries, every node raises raft's threshold above the configured one
// after a snapshot, and keeps snapshotting (the log does not grow without
// bound).
func TestSnapshotThresholdGrowsWithTheState(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.SnapshotThreshold = 64
		c.TrailingLogs = 64
		c.SnapshotInterval = 100 * time.Millisecond
	})
	li, _ := tc.leader()
	c := tc.client(li)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 2 000 leases with long names, to make the state large against the
	// entries.
	acquireAll := func(prefix string, n int) {
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					if _, err := c.Acquire(ctx, acquireReq(fmt.Sprintf("%s/%0100d", prefix, i), time.Minute)); err != nil {
						t.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	acquireAll("big", 2000)
	for i, n := range tc.nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d raises its threshold", i), func() bool {
			return n.raft.ReloadableConfig().SnapshotThreshold > 64 && n.lastSnapshotBytes() > 0
		})
		th := n.raft.ReloadableConfig().SnapshotThreshold
		if th > 64*snapshotThresholdScale {
			t.Fatalf("node %d: threshold %d above the ceiling", i, th)
		}
		// The log kept after a snapshot must still reach back to the
		// previous one (a fallback when the newest is unreadable).
		if tr := n.raft.ReloadableConfig().TrailingLogs; tr < th {
			t.Fatalf("node %d: trailing logs %d below the raised threshold %d", i, tr, th)
		}
		t.Logf("node %d: threshold %d, last snapshot %d bytes", i, th, n.lastSnapshotBytes())
	}
	// Past the raised threshold, snapshots still come: the log since the
	// last one stays within the threshold (plus what arrives during a
	// check interval).
	lastSnap := func(n *Node) uint64 {
		v, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
		return v
	}
	var before []uint64
	for _, n := range tc.nodes {
		before = append(before, lastSnap(n))
	}
	acquireAll("more", 4000)
	for i, n := range tc.nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d snapshots past its raised threshold", i), func() bool {
			last := lastSnap(n)
			return last > before[i] && n.raft.LastIndex()-last <= n.raft.ReloadableConfig().SnapshotThreshold+64
		})
	}
}
