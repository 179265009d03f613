package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A corrupted newest snapshot file is detected (raft checks its CRC, the
// FSM checks its records) and refused; the node restores the older one,
// replays its log, and serves with tokens intact.
func TestCorruptedSnapshotFileIsRefusedAndTheNodeRecovers(t *testing.T) {
	c := startCluster(t, 3, "--snapshot-threshold", "20", "--snapshot-threshold-max", "20", "--trailing-logs", "200", "--snapshot-interval", "200ms")
	victim := (c.Leader() + 1) % 3
	var last uint64
	var snaps []string
	deadline := time.Now().Add(60 * time.Second)
	for len(snaps) < 2 {
		last = c.Cycle("snapfile", 20)
		snaps, _ = filepath.Glob(filepath.Join(c.Procs[victim].DataDir, "snapshots", "*", "state.bin"))
		if time.Now().After(deadline) {
			t.Fatalf("only %d snapshots on the victim", len(snaps))
		}
	}
	c.Kill(victim, syscall.SIGTERM)
	// Snapshot dirs are named term-index-millis: the newest has the
	// highest (term, index), compared as numbers.
	snaps, _ = filepath.Glob(filepath.Join(c.Procs[victim].DataDir, "snapshots", "*", "state.bin"))
	key := func(p string) [2]uint64 {
		var term, index, ms uint64
		fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d-%d-%d", &term, &index, &ms)
		return [2]uint64{term, index}
	}
	sort.Slice(snaps, func(i, j int) bool {
		a, b := key(snaps[i]), key(snaps[j])
		return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1])
	})
	newest := snaps[len(snaps)-1]
	data, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) / 3; i < len(data)/3+16 && i < len(data); i++ {
		data[i] ^= 0x5a
	}
	if err := os.WriteFile(newest, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	// The victim must come up and catch up; then, with another node down,
	// the cluster (victim included) still issues the next token.
	deadline = time.Now().Add(30 * time.Second)
	for {
		li := c.Leader()
		ls, err1 := c.Status(li)
		vs, err2 := c.Status(victim)
		if err1 == nil && err2 == nil && vs.AppliedIndex >= ls.CommitIndex {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("victim with a corrupted snapshot did not recover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	logText, _ := os.ReadFile(c.Procs[victim].LogPath)
	refused := false
	for _, sign := range []string{"CRC checksum failed", "failed to restore snapshot", "snapshot restore failed"} {
		refused = refused || strings.Contains(string(logText), sign)
	}
	if !refused {
		t.Fatalf("the corrupted snapshot was not refused (no restore failure in the node's log)")
	}
	other := (victim + 1) % 3
	c.Kill(other, syscall.SIGKILL)
	if got := c.Cycle("snapfile", 1); got != last+1 {
		t.Fatalf("token %d after recovery, want %d", got, last+1)
	}
}
