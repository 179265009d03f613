package jepsen

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// PlantedBug is a deliberate defect in leased, fencedkv or the client
// library, compiled only into a build with the plantedbugs tag and switched
// on by LEASEFENCE_PLANTED_BUGS (for the client: in the fenced workers,
// which pass it to their client's TestingKnobs). The harness must catch
// each one: a checker that never fails proves nothing.
type PlantedBug struct {
	Name string
	// In is the program that carries the defect: "leased", "fencedkv" or
	// "client" (the client library of the harness's fenced workers).
	In   string
	What string
	// Nemeses and Time make the short run that exposes it; Catch names the
	// checkers expected to report it (any one of them suffices).
	Nemeses []string
	Time    time.Duration
	Catch   []string
	// KeepAlive runs the keep-alive workload (its checker catches it).
	KeepAlive bool
}

// PlantedBugs lists every planted defect (the names are those of
// fsm/planted_names.go, cluster/planted_common.go,
// fence/fencekv/planted_names.go and client/planted_names.go; leased,
// fencedkv and the client refuse a name they do not know, so a mismatch
// fails the run at start).
var PlantedBugs = []PlantedBug{
	{Name: "grant-no-margin", In: "leased", What: "a new grant waits for expires_at only, not expires_at + skew margin",
		Nemeses: []string{history.NemClientPause}, Time: 25 * time.Second, Catch: []string{checker.NameGrantIntervals}},
	{Name: "renew-after-expiry", In: "leased", What: "a renewal is accepted after expires_at, until the lease is removed",
		Nemeses: nil, Time: 25 * time.Second, Catch: []string{checker.NameGrantIntervals}},
	{Name: "snapshot-drops-counters", In: "leased", What: "a snapshot stores a scope's counter as its live lease's token (0 when free)",
		Nemeses: []string{history.NemKillLeader, history.NemKill}, Time: 30 * time.Second, Catch: []string{checker.NameTokens}},
	{Name: "local-reads", In: "leased", What: "a linearizable Get is answered from the local state without confirming leadership",
		Nemeses: []string{history.NemPause}, Time: 25 * time.Second, Catch: []string{checker.NameLinearizable}},
	{Name: "lease-id-by-resource", In: "leased", What: "lease ids derive from the resource, so a stale holder's release frees the next holder's lease",
		Nemeses: nil, Time: 25 * time.Second, Catch: []string{checker.NameLinearizable, checker.NameTokens}},
	{Name: "wall-clock-time", In: "leased", What: "the leader's cluster time is its wall clock, not its monotonic clock",
		Nemeses: []string{"clock-bump"}, Time: 30 * time.Second, Catch: []string{checker.NameSafeWindows, checker.NameGrantIntervals, checker.NameLinearizable}},
	{Name: "release-ack-before-commit", In: "leased", What: "a release is acknowledged once proposed, before Raft commits it",
		Nemeses: nm.ComboNemeses, Time: 45 * time.Second, Catch: []string{checker.NameLinearizable, checker.NameDurable}},
	{Name: "renew-ack-before-commit", In: "leased", What: "a renewal is acknowledged at once and proposed 200 ms later, before Raft commits it",
		Nemeses: []string{history.NemPartitionLeader, history.NemKillLeader}, Time: 45 * time.Second, Catch: []string{checker.NameDurable, checker.NameSafeWindows, checker.NameGrantIntervals}},
	{Name: "dedup-resource-only", In: "leased", What: "a request id's retry is compared by resource only, so it replays a lease across scopes, holders, ttls and wait",
		Nemeses: nil, Time: 25 * time.Second, Catch: []string{checker.NameRequestIDs}},
	{Name: "restore-bumps-known-scopes", In: "leased", What: "a restore raises only the counters of the scopes the backup knows, not the token floor",
		Nemeses: []string{history.NemRestore}, Time: 30 * time.Second, Catch: []string{checker.NameRestore, checker.NameTokens}},
	{Name: "restore-ignores-epoch", In: "leased", What: "a restore ignores its epoch, so a second restore of one backup reissues the tokens of the cluster the first one started",
		Nemeses: []string{history.NemRestoreAgain}, Time: 40 * time.Second, Catch: []string{checker.NameRestore, checker.NameTokens}},
	{Name: "cluster-id-unchecked", In: "leased", What: "Raft RPCs carry and check no cluster id, so a founding node restored with another bump can lead and grant below the loss",
		Nemeses: []string{history.NemRestoreMismatch}, Time: 30 * time.Second, Catch: []string{checker.NameRestore, checker.NameTokens}},
	{Name: "skip-entry-checksum", In: "leased", What: "log entry checksums are not verified, so a node applies an entry its disk changed",
		Nemeses: []string{history.NemStorage}, Time: 60 * time.Second, Catch: []string{checker.NameStorage}},
	{Name: "ignorable-unchecked", In: "leased", What: "an entry of an unknown ignorable type is skipped without its checksum, so a flipped high bit of a type byte skips a committed entry",
		Nemeses: []string{history.NemStorage}, Time: 60 * time.Second, Catch: []string{checker.NameStorage}},
	{Name: "wal-emptied-on-install", In: "leased", What: "a snapshot install empties the raft-wal log although it holds entries past the snapshot (hashicorp/raft#697)",
		Nemeses: []string{history.NemStorage}, Time: 60 * time.Second, Catch: []string{checker.NameNoPanics}},
	{Name: "read-raft-applied", In: "leased", What: "a linearizable read waits for raft's applied index, which moves before the state machine applies; the leader's apply stalls 200 ms at every 16th entry",
		Nemeses: nil, Time: 40 * time.Second, Catch: []string{checker.NameReadsSeeWatched}},
	{Name: "forward-no-timeout", In: "leased", What: "a follower forwarding to a silent leader waits out the caller's deadline (no hop timeout, no re-route)",
		Nemeses: []string{history.NemPauseLeader}, Time: 30 * time.Second, Catch: []string{checker.NameUnavailability}},
	{Name: "leader-applies-unwritten", In: "leased", What: "the leader applies and answers an entry, and tells followers it is committed, before its own log write (held 100 ms) is done",
		Nemeses: []string{history.NemLoseTail}, Time: 45 * time.Second, Catch: []string{checker.NameDurable, checker.NameTokens, checker.NameLinearizable, checker.NameConverge}},
	{Name: "lost-voter-unchecked", In: "leased", What: "a first start with --join does not ask whether the node is a voter already, so a voter whose data dir was lost runs again with an empty log (and would vote any candidate in)",
		Nemeses: []string{history.NemLostVoter}, Time: 30 * time.Second, Catch: []string{checker.NameLostVoter}},
	// The same run as lost-voter-unchecked: lost-voter's faults alternate,
	// the first with the founding --bootstrap list (nemesis.lostVoterVia),
	// so a 30 s run starts a wiped founder with it some three times.
	{Name: "lost-founder-unchecked", In: "leased", What: "a founder started again with its --bootstrap list on a wiped data dir is not checked, so it runs with an empty log and grants its vote to any candidate",
		Nemeses: []string{history.NemLostVoter}, Time: 30 * time.Second, Catch: []string{checker.NameLostVoter}},
	// lost-voter's third start (nemesis.lostVoterVia): every node down,
	// the wiped founder first.
	{Name: "founder-votes-unheld", In: "leased", What: "a founder started on a wiped data dir with its --bootstrap list while every other node is down takes the cluster for forming and votes at once; once the others are back it runs with an empty log",
		Nemeses: []string{history.NemLostVoter}, Time: 30 * time.Second, Catch: []string{checker.NameLostVoter}},
	{Name: "keepalive-no-heartbeats", In: "leased", What: "a KeepAlive stream sends no heartbeats: renewals that commit over a second late (a slow disk) look like a silent node, the client moves its stream, and its lease ends while the cluster renews it",
		Nemeses: []string{history.NemSlowDisk}, Time: 60 * time.Second, Catch: []string{checker.NameKeepAliveKept}, KeepAlive: true},
	{Name: "add-unprobed", In: "leased", What: "the leader adds a member as a voter without probing it and without the quorum rule",
		Nemeses: []string{history.NemMemberUnreachable}, Time: 25 * time.Second, Catch: []string{checker.NameMembershipQuorum}},
	{Name: "client-sent-at-on-answer", In: "client", What: "the client takes sent_at when the answer arrives: a late answer's safe window is stretched by its delay",
		Nemeses: []string{history.NemClientPauseAcquire}, Time: 25 * time.Second, Catch: []string{checker.NameSafeWindows}},
	{Name: "client-monotonic-clock", In: "client", What: "the client measures safe deadlines on the host's monotonic clock, which stops while the host is suspended",
		Nemeses: []string{history.NemClientPause}, Time: 25 * time.Second, Catch: []string{checker.NameSafeWindows}},
	{Name: "client-full-ttl", In: "client", What: "the client uses the full ttl instead of the answer's ttl_remaining: a replayed grant's window is overstated by the time since the grant",
		Nemeses: []string{history.NemClientPauseReplay}, Time: 25 * time.Second, Catch: []string{checker.NameSafeWindows}},
	{Name: "client-no-drift", In: "client", What: "the client ignores the drift bound: with the clocks at its edge, its safe window outlives the next grant by up to (ttl × drift − margin)/(1 − drift)",
		Nemeses: []string{history.NemClockDriftEdge}, Time: 30 * time.Second, Catch: []string{checker.NameSafeWindows}},
	{Name: "client-zero-margin", In: "client", What: "the client subtracts no margin: on a clock read in ticks, at the drift edge, its safe window outlives the next grant by up to a tick",
		Nemeses: []string{history.NemClockDriftEdgeCoarse}, Time: 45 * time.Second, Catch: []string{checker.NameSafeWindows}},
	{Name: "client-silence-from-last-answer", In: "client", What: "the client counts a keep-alive stream's silence from its last answer alone: after an idle spell it tears the healthy stream down and sends the renewal again",
		Nemeses: nil, Time: 30 * time.Second, Catch: []string{checker.NameRenewals}, KeepAlive: true},
	{Name: "accept-lower-token", In: "fencedkv", What: "fencedkv applies a write whose token is below the scope's highest",
		Nemeses: []string{history.NemClientPause}, Time: 25 * time.Second, Catch: []string{checker.NameFencedTokens, checker.NameFinalRead}},
}

// FindPlantedBug returns the planted bug called name.
func FindPlantedBug(name string) (PlantedBug, error) {
	var names []string
	for _, b := range PlantedBugs {
		if b.Name == name {
			return b, nil
		}
		names = append(names, b.Name)
	}
	sort.Strings(names)
	return PlantedBug{}, fmt.Errorf("no planted bug %q (have %s)", name, strings.Join(names, ","))
}

// clientBugs reports whether bugs name a planted client defect.
func clientBugs(bugs []string) bool {
	for _, n := range bugs {
		if b, err := FindPlantedBug(n); err == nil && b.In == "client" {
			return true
		}
	}
	return false
}

// plantedEnv returns the environment that switches bugs on in program in.
func plantedEnv(bugs []string, in string) []string {
	var on []string
	for _, n := range bugs {
		if b, err := FindPlantedBug(n); err == nil && b.In == in {
			on = append(on, n)
		}
	}
	if len(on) == 0 {
		return nil
	}
	return []string{"LEASEFENCE_PLANTED_BUGS=" + strings.Join(on, ",")}
}
