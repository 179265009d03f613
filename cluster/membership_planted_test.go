//go:build plantedbugs

package cluster

import (
	"testing"

	"github.com/leasefence/leasefence/api"
)

// The planted add-unprobed adds an address where nothing listens as a
// voter, without the probe or the quorum rule (the behaviour before
// issue 14 §3), so the harness's membership-keeps-quorum checker has
// something to catch. Run with: go test -tags plantedbugs -run Planted ./cluster/
func TestPlantedAddUnprobedAddsAnUnreachableVoter(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.Testing.PlantedBugs = []string{BugAddUnprobed} })
	_, leader := tc.leader()
	addr := freeAddrs(t, 1)[0]
	if _, err := leader.admin.Join(ctxT(t), &api.JoinRequest{Id: "x1", Addr: addr}); err != nil {
		t.Fatalf("planted add of unreachable %s: %v, want it accepted", addr, err)
	}
	found := false
	for _, m := range members(t, leader) {
		found = found || (m.Addr == addr && m.Suffrage == "voter")
	}
	if !found {
		t.Fatalf("%s is not a voter: %v", addr, members(t, leader))
	}
}
