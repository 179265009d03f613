package history

// Fault kinds: the Kind of a Fault (nemesis.jsonl) and the names
// --nemesis takes. The nemeses that realise them are in jepsen/nemesis.go
// and its siblings.

// Realised in nemesis.go.

// Nemesis kinds (--nemesis takes a comma-separated list of these).
const (
	NemKill        = "kill"         // kill -9 a random node, restart it
	NemKillLeader  = "kill-leader"  // kill -9 the leader, restart it
	NemPause       = "pause"        // SIGSTOP a random node, SIGCONT it
	NemPauseLeader = "pause-leader" // SIGSTOP the leader, SIGCONT it
	NemClientPause = "client-pause" // SIGSTOP a worker between its grant and its write
	// NemClientPauseAcquire stops a worker when the answer to its acquire
	// has arrived, before its client library sees it (a late answer).
	NemClientPauseAcquire = "client-pause-acquire"
	// NemClientPauseReplay loses the answer to a worker's acquire (held
	// back half a ttl, then Unavailable), so that its client's retry is
	// answered by a replay with less than the ttl left, and stops the
	// worker at that lease's write.
	NemClientPauseReplay = "client-pause-replay"
)

// Realised in nemesis/clock.go.

// Clock nemeses. They need the nodes started with leased's unsafe
// fault-injection clock (ClockArgs), which Run does when one is enabled.
//
// DESIGN.md ("Time"): wall-clock steps and skew between nodes change
// nothing, so clock-bump and clock-strobe are in spec and every checker
// must pass. A monotonic rate far beyond the drift bound is out of spec:
// clock-rate runs must keep fencing (tokens, fenced writes) and
// linearizability, while the exclusion checkers are reported but not
// required (MarkRequired).
const (
	NemClockBump   = "clock-bump"   // wall offset of ± 1 s to 1 h on one or several nodes
	NemClockStrobe = "clock-strobe" // wall offset flipping between + and − every 50–200 ms on one or several nodes
	NemClockRate   = "clock-rate"   // the leader's monotonic clock at 0.5× or 2× (out of spec)
)

// Realised in nemesis/driftedge.go (the run's setup: driftedge.go).

// NemClockDriftEdge puts the clocks at the edge of what the settings allow
// (issue 15, the client's drift and margin bugs). It is in spec: every
// clock runs within the drift bound of real time. It is also a run
// configuration (DriftEdgeFor): the nodes assume a large drift bound with
// the smallest skew margin that bound allows, and the fenced workers'
// client clocks run slow by the bound for the whole run; each fault runs
// every node's monotonic clock fast by the bound, so whichever node leads
// ages leases as fast as the bound permits, and then stops a worker before
// its write (a client-pause, recorded as its own fault) so that its
// lease runs out while it holds it.
//
// The arithmetic (DESIGN.md, "Time"), with d the drift, T the ttl (= the
// max ttl), S = d × T the skew margin, m the client margin: a grant or
// renewal stamped at real time t_g leaves the resource free for the next
// grant from t_g + (T + S)/(1 + d) = t_g + T on. The holder's client
// measures sent_at + T(1 − d) − m on a clock at 1 − d, which in real time
// ends at sent_at + T − m/(1 − d): before t_g + T, by m/(1 − d) at least.
// With the drift ignored (client-no-drift) it ends at sent_at + (T −
// m)/(1 − d), up to (T·d − m)/(1 − d) after the next grant may come: 104
// ms at the settings below.
//
// With no margin (client-zero-margin) the window ends at sent_at + T,
// which is t_g − sent_at (the request's way to the leader) before the
// resource may be granted again, and the next holder's window starts when
// its own acquire has been committed and answered, later still: on clocks
// read to the nanosecond the two windows at most touch, they cannot
// overlap. The margin is there for discrete readings (DESIGN.md: "with no
// margin one unit of reading error is enough for two holders' windows to
// touch"), which NemClockDriftEdgeCoarse adds.
const NemClockDriftEdge = "clock-drift-edge"

// NemClockDriftEdgeCoarse is NemClockDriftEdge with client clocks that
// read in ticks (each reading the last tick passed), and a client margin
// of one tick, the least that covers a reading's error. A deadline
// sent_at + T(1 − d) − m is reached at the first tick at or after it; with
// a margin of one tick that tick is never later than sent_at + T(1 − d) on
// an exact clock, so the correct client still ends by sent_at + T. With no
// margin it may be up to a tick later. The tick is chosen for the worst
// case, a full-ttl deadline just past a tick (coarseTick): at T = 2 s, d =
// 0.05, ticks of 270 ms, T(1 − d) = 1.9 s is 7 ticks and 10 ms, so a send
// read φ after its tick ends (260 ms − φ)/0.95 after sent_at + T, an
// overlap whenever that is more than the next holder's delay (its way to
// the leader and back once the resource is free).
const NemClockDriftEdgeCoarse = "clock-drift-edge-coarse"

// Realised in nemesis/clockpause.go.

// NemClockRateClientPause is a combined fault (issue 15 §5): the leader's
// monotonic clock at 0.5× or 2× (as clock-rate: out of spec) while a
// worker is stopped before its write (as client-pause). Leases expire at
// another pace than the paused holder's client assumes; exclusion is no
// longer promised, but fencing must still refuse the resumed worker's
// stale write and every fencing checker must stay valid.
const NemClockRateClientPause = "clock-rate-client-pause"

// Realised in nemesis/combo.go.

// Combined and minority faults (issue "the harness sees what it missed",
// item 5): faults that single-kind nemeses never put together.
const (
	// NemKillMinority kills -9 the largest minority at once (1 of 3, 2 of
	// 5), the leader among them when the seed says so, holds, and
	// restarts them all. A quorum stays up: the cluster must keep serving.
	NemKillMinority = "kill-minority"
	// NemRollingRestart stops every node in turn with SIGTERM (the leader
	// hands over first), restarts it from its data dir and waits until it
	// has caught up with the leader before the next: an upgrade under load.
	NemRollingRestart = "rolling-restart"
	// NemPartitionKill cuts the cluster into a minority and a majority and,
	// while the cut holds, kills -9 a node of the majority (the leader when
	// there is one), then heals both: a partition during a kill.
	NemPartitionKill = "partition-kill"
	// NemLoseTail cuts a minority of followers off, lets the leader and
	// the other followers serve, then kills -9 the leader (what it had
	// not yet written to its log is gone, as in a power cut: the leader
	// writes while it replicates) and stops those followers; the leader,
	// restarted, and the followers that were cut off elect without them.
	// An entry only the stopped followers held was never acknowledged.
	NemLoseTail = "lose-tail"
)

// Realised in nemesis/membership.go.

// NemMemberUnreachable asks the leader (ClusterService.Join, what
// `leasectl members add` does) to add voters at loopback addresses where
// nothing listens (issue 14 §3, issue 15 §6), one after another, records
// each answer, holds, and heals by removing every one that was not
// refused. Half the time it adds as many as the cluster has nodes (with 3
// nodes, 3: accepted as voters they would leave 3 answering of 6, one
// short of a quorum), otherwise 1 to that many. Effective when every add
// was answered (refused or added).
const NemMemberUnreachable = "member-unreachable"

// Realised in nemesis/net.go.

// Network nemesis kinds, realised through the cluster's Net (proxy or
// namespace mode).
const (
	NemPartitionLeader = "partition-leader" // isolate the leader from every other node
	NemPartitionHalves = "partition-halves" // a random minority / majority split
	NemPartitionRing   = "partition-ring"   // each node sees a majority, no two the same
	NemPartitionBridge = "partition-bridge" // two halves joined by one bridge node
	NemPartitionOneway = "partition-oneway" // one node receives from nobody, the others hear it
	NemNetSlow         = "net-slow"         // delay on every link
	NemNetFlaky        = "net-flaky"        // connections reset and refused at random
)

// Realised in nemesis/restore.go.

// NemRestore is disaster recovery mid-run (issue 15 §1): take a backup
// through the API (what `leasectl snapshot save` does), grant in scopes the
// backup never sees (the restore probe, RestorePrefix) while the workers
// keep granting in theirs, lose every node (SIGKILL; the data dirs are
// moved aside), start a new cluster on the same addresses from the backup
// (`leased --restore`, default bump), and probe the same scopes again. The
// workers and fencedkv carry on across it.
//
// A restore loses what was acknowledged after the backup by design, so a
// run with it is not in spec for the exclusion, durability and
// linearizability checkers (MarkRequired, ReasonRestore); the fencing
// checkers and CheckRestore decide it. It is not part of "all": name it.
const NemRestore = "restore"

// NemRestoreMismatch is NemRestore with an operator's mistake: one founding
// node of the new cluster (in turn, by restore count) is given
// a restore epoch 7 s later than the others' (its operator read the clock
// again instead of giving every founding node one value; with the epoch's
// line a different bump no longer changes the floor) and started 2 s
// before the others, so that, if nothing keeps it out, it wins the first
// election and grants from another floor than the replicas that apply its
// entries (they diverge; tokens-unique-monotonic sees one lease with two
// tokens). The nodes must keep it out (its cluster id differs);
// CheckRestore and tokens-unique-monotonic decide. Once the probe has run,
// the odd node is repaired as docs/OPERATIONS.md says: stopped, its data
// dir emptied, and started again with the same file, the default bump and
// the others' epoch. Not part of "all": name it.
const NemRestoreMismatch = "restore-mismatch"

// NemRestoreAgain is NemRestore from the same backup file again: its first
// fault takes a backup and restores from it as NemRestore does; every
// later one loses the cluster that restore started (after it served, the
// workers granting) and restores the same file once more, as an operator
// does whose restored cluster was lost before anyone backed it up. Each
// restore has its own epoch (`--restore-epoch`, later each time), so the
// new cluster must beat every token the lost one granted; CheckRestore
// and tokens-unique-monotonic decide. Not part of "all": name it.
const NemRestoreAgain = "restore-again"

// Realised in nemesis/silent.go.

// NemSilentLeader makes the leader silent without a reset (issue 15 §2):
// in namespace mode every packet into and out of its namespace is
// dropped, clients' included (netns.NSNet.Silence), while its process runs on;
// in proxy mode every proxy of its peer links stops forwarding without
// closing, both ways (the harness does not proxy client connections, so
// there clients still reach it: use netns for the whole fault).
const NemSilentLeader = "silent-leader"

// Realised in nemesis/slowdisk.go.

// NemSlowDisk makes every node's disk slow for 14–18 s: each fsync and
// fdatasync of a file under a node's data dir waits 1.8–2.2 s before it
// reaches the disk (the nodes run on a FUSE loopback mount, package
// slowdisk). The nodes stay up, connected and answering; every commit
// takes two to four seconds. A keep-alive stream then sees its renewals
// answered late, never lost: CheckKeepAliveKept demands that no
// keep-alive lease ended while held. Needs root and /dev/fuse, and the
// nodes as local processes (not NetDocker); the mount is there for the
// whole run, so it is not part of "all": name it.
const NemSlowDisk = "slow-disk"

// Realised in nemesis/lostvoter.go.

// NemLostVoter loses a follower's whole data dir and starts it again
// under its old id, without removing it first: the operator's mistake
// docs/OPERATIONS.md warns against ("Replacing a dead node"). Its faults
// alternate between a start with --join and, for a founder, one with the
// --bootstrap list the cluster was founded with (LostVoterOutcome.Via). A
// voter with an empty log would grant its vote to any candidate, so the
// node must refuse to start (with --join it asks its join target whether
// it is a voter already, with --bootstrap the other founders whether the
// cluster recorded it as having served); CheckLostVoterRefused decides.
// The heal replaces it as the docs say (remove, wipe, join).
const NemLostVoter = "lost-voter"

// Realised in nemesis/state.go.

// Nemeses that move state around rather than break processes.
const (
	// NemSnapshot kills a follower, lets the others take snapshots and
	// compact their logs past it (the nodes run with a small snapshot
	// threshold), restarts it, and verifies it caught up through an
	// installed snapshot.
	NemSnapshot = "snapshot"
	// NemMember removes a follower from the configuration, kills it, wipes
	// its data dir and brings it back as a fresh node that joins, verifying
	// the member count at each step.
	NemMember = "member"
)

// Realised in nemesis/storage.go.

// NemStorage stops a follower, changes one byte of a committed command
// entry's body in its log (raft.db or the raft-wal segments under wal/,
// whichever its data dir holds; a resource name, as a bad disk or a stray
// write would) or, half the time when it has snapshots, one byte of its
// newest snapshot, starts it again and watches what it does; the heal
// replaces it (members remove, wipe, join), as docs/OPERATIONS.md says.
// CheckStorageRefused then demands that the node refused (exited naming
// the corrupt store), fenced itself, or (a snapshot) set the corrupt one
// aside and rebuilt from an older one and the log; never served on.
const NemStorage = "storage"

// IsDriftEdge reports whether fault kind k is a clock-drift-edge one.
func IsDriftEdge(k string) bool { return k == NemClockDriftEdge || k == NemClockDriftEdgeCoarse }

// IsRestore reports whether fault kind k restores from a backup.
func IsRestore(k string) bool {
	return k == NemRestore || k == NemRestoreMismatch || k == NemRestoreAgain
}
