package jepsen

import (
	"fmt"
	"sort"
	"strings"
	"time"
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

// NetStats counts traffic a fault acted on. Units depend on the mode:
// bytes and chunks in proxy mode, packets in namespace mode.
type NetStats struct {
	// Held maps "a->b" to the traffic from a to b held back (stalled
	// bytes, proxy) or dropped (packets, netns) by the partition.
	Held map[string]int64 `json:"held,omitempty"`
	// Delayed counts chunks delivered late by Slow (proxy mode only).
	Delayed int64 `json:"delayed,omitempty"`
	// Reset counts connections reset or refused by Flaky (proxy), or
	// packets answered with a reset (netns).
	Reset int64 `json:"reset,omitempty"`
}

// HeldTotal sums Held.
func (s NetStats) HeldTotal() int64 {
	var t int64
	for _, v := range s.Held {
		t += v
	}
	return t
}

// grudgeString renders a grudge deterministically: "n1<-n2,n3; n2<-n1".
func grudgeString(g map[string][]string) string {
	var parts []string
	for _, b := range sortedIDs(g) {
		if len(g[b]) == 0 {
			continue
		}
		from := append([]string(nil), g[b]...)
		sort.Strings(from)
		parts = append(parts, b+"<-"+strings.Join(from, ","))
	}
	if len(parts) == 0 {
		return "no partition"
	}
	return strings.Join(parts, "; ")
}

func sortedIDs(g map[string][]string) []string {
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// checkGrudge refuses node ids the net does not know.
func checkGrudge(g map[string][]string, known func(string) bool) error {
	for b, froms := range g {
		if !known(b) {
			return fmt.Errorf("partition: unknown node %q", b)
		}
		for _, a := range froms {
			if !known(a) {
				return fmt.Errorf("partition: unknown node %q", a)
			}
		}
	}
	return nil
}
