//go:build plantedbugs

package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/leasefence/leasefence/fsm"
)

// This file exists only in builds with the plantedbugs tag: the fault
// harness (jepsen/) switches on deliberate defects to prove its checkers
// can fail. A release build has planted_off.go instead.

// PlantedBugs lists the node's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugLocalReads:         "a linearizable Get is answered from the local state, without confirming leadership or forwarding",
	BugWallClockTime:      "the leader's cluster time is the wall clock (the fault clock's, when there is one), not its monotonic clock",
	BugLeaseIDByResource:  "a lease id is derived from the resource, so a stale holder's renew and release act on the next holder's lease",
	BugReleaseAckEarly:    "a release of a live lease is acknowledged once proposed, before Raft commits it",
	BugRenewAckEarly:      "a renewal of a live lease is acknowledged at once and proposed 200 ms later, so a leader killed or cut off in between loses renewals it acknowledged",
	BugForwardNoTimeout:   "a follower forwards a call to the leader it knows and waits out the caller's deadline when that leader is silent (no hop timeout, no re-route)",
	BugAddUnprobed:        "the leader adds a member as a voter without probing it and without the quorum rule, so unreachable voters can cost the cluster its quorum",
	BugClusterIDUnchecked: "Raft RPCs carry and check no cluster id, so a founding node restored with another backup or bump votes, replicates and can lead",
}

var plantedOn = map[string]bool{}

// PlantBugs switches on the named defects, the node's and the FSM's, and
// returns the names neither knows. Call it before Start.
func PlantBugs(names []string) (unknown []string) {
	for _, n := range fsm.PlantBugs(names) {
		if _, ok := PlantedBugs[n]; !ok {
			unknown = append(unknown, n)
			continue
		}
		plantedOn[n] = true
	}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(unknown, n) {
			plantedList = append(plantedList, "planted-bug:"+n)
		}
	}
	sort.Strings(plantedList)
	return unknown
}

// plantedList names every defect switched on, for Status's unsafe list.
var plantedList []string

func planted(name string) bool {
	if _, ok := PlantedBugs[name]; !ok {
		panic(fmt.Sprintf("cluster: no planted bug %q", name)) // a typo in this package
	}
	return plantedOn[name]
}
