package netns

import (
	"fmt"
	"sort"
	"strings"
)

// Stats counts traffic a fault acted on. Units depend on the mode:
// bytes and chunks in proxy mode, packets in namespace mode.
type Stats struct {
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
func (s Stats) HeldTotal() int64 {
	var t int64
	for _, v := range s.Held {
		t += v
	}
	return t
}

// GrudgeString renders a grudge deterministically: "n1<-n2,n3; n2<-n1".
func GrudgeString(g map[string][]string) string {
	var parts []string
	for _, b := range sortedKeys(g) {
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

func sortedKeys(g map[string][]string) []string {
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// CheckGrudge refuses node ids the net does not know.
func CheckGrudge(g map[string][]string, known func(string) bool) error {
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
