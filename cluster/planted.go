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
// can fail. A release build has planted_off.go instead, where TestingKnobs
// is empty and every planted branch compiles away.

// PlantedBugs lists the node's planted defects and what each breaks.
var PlantedBugs = map[string]string{
	BugLocalReads:           "a linearizable Get is answered from the local state, without confirming leadership or forwarding",
	BugWallClockTime:        "the leader's cluster time is the wall clock (the fault clock's, when there is one), not its monotonic clock",
	BugLeaseIDByResource:    "a lease id is derived from the resource, so a stale holder's renew and release act on the next holder's lease",
	BugReleaseAckEarly:      "a release of a live lease is acknowledged once proposed, before Raft commits it",
	BugRenewAckEarly:        "a renewal of a live lease is acknowledged at once and proposed 200 ms later, so a leader killed or cut off in between loses renewals it acknowledged",
	BugForwardNoTimeout:     "a follower forwards a call to the leader it knows and waits out the caller's deadline when that leader is silent (no hop timeout, no re-route)",
	BugAddUnprobed:          "the leader adds a member as a voter without probing it and without the quorum rule, so unreachable voters can cost the cluster its quorum",
	BugClusterIDUnchecked:   "Raft RPCs carry and check no cluster id, so a founding node restored with another backup or bump votes, replicates and can lead",
	BugLeaderUnwritten:      "the leader applies and answers an entry, and tells followers it is committed, before its own log write (held 100 ms, a slow disk) is done: a power cut can lose what it answered",
	BugReadRaftApplied:      "a linearizable read waits for raft's applied index, which raft moves before the state machine applied the entry; the leader's apply stalls 200 ms at every 16th entry (a GC, CPU starvation), so its reads miss entries the followers have applied and published",
	BugRestoreIgnoresEpoch:  "a restore ignores its epoch (the floor is the backup's highest token plus the bump, the cluster id has no epoch), so a second restore of one backup reissues the tokens of the cluster the first restore started",
	BugKeepAliveNoBeats:     "a KeepAlive stream sends no heartbeats although its client asked for them, so renewals that take over a second to commit (a slow disk) look like a silent node: the client moves its stream, never sees an answer, and its lease ends while the cluster renews it",
	BugLostVoterUnchecked:   "a first start with --join does not ask its join target whether the node is a voter already, so a voter whose data dir was lost runs again with an empty log and grants its vote to any candidate",
	BugLostFounderUnchecked: "a founder started again with its --bootstrap list on a wiped data dir does not ask its peers whether the cluster recorded it as having served, so it runs again with an empty log and grants its vote to any candidate",
	BugFounderVotesUnheld:   "a founder started on a wiped data dir with its --bootstrap list that finds none of the other founders answering (every node down) takes the cluster for forming and votes at once, so once the others are back it runs with an empty log and grants its vote to any candidate",
	BugWALEmptiedOnInstall:  "a snapshot install empties the raft-wal log although it holds entries past the snapshot (hashicorp/raft#697): the follower takes appends over the hole and panics re-applying them",
}

// TestingKnobs are per-node test switches (Config.Testing), compiled in
// only with the plantedbugs tag: two nodes in one process may differ.
// Status lists every defect switched on as unsafe "planted-bug:NAME".
type TestingKnobs struct {
	// PlantedBugs names the node's defects (keys of PlantedBugs) this
	// node has. Config.Validate refuses a name it does not know.
	PlantedBugs []string
	// FSM are the knobs of this node's state machine (fsm.PlantedBugs),
	// given to every fsm.State the node builds and to its log store's
	// entry checks. Give every replica the same.
	FSM fsm.TestingKnobs
}

// PlantedKnobs sorts names into the knobs of the node (names in
// PlantedBugs) and of its FSM (names in fsm.PlantedBugs), and returns the
// names neither knows. Blank names are skipped.
func PlantedKnobs(names []string) (k TestingKnobs, unknown []string) {
	for _, n := range names {
		switch n = strings.TrimSpace(n); {
		case n == "":
		case fsm.PlantedBugs[n] != "":
			k.FSM.PlantedBugs = append(k.FSM.PlantedBugs, n)
		case PlantedBugs[n] != "":
			k.PlantedBugs = append(k.PlantedBugs, n)
		default:
			unknown = append(unknown, n)
		}
	}
	return k, unknown
}

// validate refuses names neither this package nor fsm knows.
func (k *TestingKnobs) validate() error {
	var unknown []string
	for _, n := range k.PlantedBugs {
		if _, ok := PlantedBugs[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("unknown planted bugs %s", strings.Join(unknown, ","))
	}
	return k.FSM.Validate()
}

func (k *TestingKnobs) planted(name string) bool {
	if _, ok := PlantedBugs[name]; !ok {
		panic(fmt.Sprintf("cluster: no planted bug %q", name)) // a typo in this package
	}
	return slices.Contains(k.PlantedBugs, name)
}

// fsmKnobs are the knobs the node gives its state machine.
func (k *TestingKnobs) fsmKnobs() fsm.TestingKnobs { return k.FSM }

// plantedList names every defect switched on, the node's and the FSM's,
// sorted, for Status's unsafe list.
func (k *TestingKnobs) plantedList() []string {
	var out []string
	for _, n := range slices.Concat(k.PlantedBugs, k.FSM.PlantedBugs) {
		out = append(out, "planted-bug:"+n)
	}
	sort.Strings(out)
	return slices.Compact(out)
}
