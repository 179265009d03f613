package jepsen

import (
	"sort"
	"time"

	"github.com/leasefence/leasefence/internal/netns"
)

// Net modes (Config.NetMode, cmd/jepsen --net).
const (
	NetProxy = "proxy" // per-directed-link TCP proxies in the harness (default, no root)
	NetNS    = "netns" // one network namespace per node, iptables rules (root)
)

// Net injects network faults between nodes. Only node↔node traffic is
// affected: clients (workers, watcher, harness) always reach every node.
// Every method replaces the fault of its kind that was in place; Heal
// removes every fault. Methods are safe for concurrent use.
type Net interface {
	// Partition makes grudge[b] the nodes b does not receive from: bytes
	// (proxy) or packets (netns) from a to b are held back for every a in
	// grudge[b]. It replaces the previous partition; an empty grudge heals
	// partitions only.
	Partition(grudge map[string][]string) error
	// Slow delays traffic on every link by delay plus a uniform jitter in
	// [0, jitter), order preserved. Zero delay and jitter end it.
	Slow(delay, jitter time.Duration) error
	// Flaky makes every link unreliable with probability p (what that
	// means depends on the mode, see Describe). Zero ends it.
	Flaky(p float64) error
	// Heal removes every partition, delay and flakiness.
	Heal() error
	// Describe says how the current faults are realised.
	Describe() string
	// Stats says what the faults did to traffic so far: each counter
	// starts from zero when the fault it counts is set (Partition, Slow,
	// Flaky), so nemeses read it before Heal to see the fault bite.
	Stats() NetStats
	// Close heals and releases everything the mode set up.
	Close() error
}

// NetStats counts traffic a fault acted on (netns.Stats, shared with the
// namespace network).
type NetStats = netns.Stats

func sortedIDs(g map[string][]string) []string {
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
