package nemesis

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

// hears returns, for each node, the nodes it receives from under g
// (itself included).
func hears(ids []string, g map[string][]string) map[string]string {
	out := map[string]string{}
	for _, b := range ids {
		var h []string
		for _, a := range ids {
			if !contains(g[b], a) {
				h = append(h, a)
			}
		}
		sort.Strings(h)
		out[b] = strings.Join(h, ",")
	}
	return out
}

func TestPartitionShapes(t *testing.T) {
	for _, size := range []int{3, 5} {
		var ids []string
		for i := 1; i <= size; i++ {
			ids = append(ids, "n"+string(rune('0'+i)))
		}
		majority := size/2 + 1
		n := &Nemesis{rng: rand.New(rand.NewPCG(uint64(size), 1))}
		for seed := 0; seed < 20; seed++ {
			// Leader isolated: it hears only itself, the others hear all but it.
			g, _, others := n.grudge(history.NemPartitionLeader, "n1", ids)
			h := hears(ids, g)
			if h["n1"] != "n1" || len(others) != size-1 || contains(others, "n1") {
				t.Fatalf("partition-leader: %v, others %v", h, others)
			}
			// Halves: the expected side is a strict majority, cut both ways from the rest.
			g, desc, maj := n.grudge(history.NemPartitionHalves, "", ids)
			if len(maj) < majority || len(maj) == size {
				t.Fatalf("partition-halves %s: majority side %v", desc, maj)
			}
			h = hears(ids, g)
			for _, id := range maj {
				sorted := append([]string(nil), maj...)
				sort.Strings(sorted)
				if h[id] != strings.Join(sorted, ",") {
					t.Fatalf("partition-halves %s: %s hears %s", desc, id, h[id])
				}
			}
			// Ring: every node hears a majority, no two the same one.
			g, desc, _ = n.grudge(history.NemPartitionRing, "", ids)
			h = hears(ids, g)
			seen := map[string]bool{}
			for _, id := range ids {
				if len(strings.Split(h[id], ",")) != majority || seen[h[id]] {
					t.Fatalf("partition-ring %s: %v", desc, h)
				}
				seen[h[id]] = true
			}
			// Bridge: one node hears everyone, the two halves do not hear each other.
			g, desc, _ = n.grudge(history.NemPartitionBridge, "n2", ids)
			h = hears(ids, g)
			full := 0
			for _, id := range ids {
				if h[id] == strings.Join(ids, ",") {
					full++
				} else if len(strings.Split(h[id], ",")) >= size {
					t.Fatalf("partition-bridge %s: %v", desc, h)
				}
			}
			if h["n2"] == strings.Join(ids, ",") {
				t.Fatalf("partition-bridge %s: the leader n2 is the bridge", desc)
			}
			if full != 1 {
				t.Fatalf("partition-bridge %s: %d nodes hear everyone, want the bridge only: %v", desc, full, h)
			}
			// One-way: one node hears only itself; everyone else hears everyone.
			g, desc, _ = n.grudge(history.NemPartitionOneway, "", ids)
			h = hears(ids, g)
			alone := 0
			for _, id := range ids {
				switch h[id] {
				case id:
					alone++
				case strings.Join(ids, ","):
				default:
					t.Fatalf("partition-oneway %s: %v", desc, h)
				}
			}
			if alone != 1 {
				t.Fatalf("partition-oneway %s: %v", desc, h)
			}
		}
	}
}
