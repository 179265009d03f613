package cluster

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// Names of the node's planted defects. Only a build with the plantedbugs
// tag can switch them on, per node, through Config.Testing (planted.go);
// see jepsen/README.md, "Planted bugs".
const (
	BugLocalReads           = "local-reads"
	BugWallClockTime        = "wall-clock-time"
	BugLeaseIDByResource    = "lease-id-by-resource"
	BugReleaseAckEarly      = "release-ack-before-commit"
	BugRenewAckEarly        = "renew-ack-before-commit"
	BugForwardNoTimeout     = "forward-no-timeout"
	BugAddUnprobed          = "add-unprobed"
	BugClusterIDUnchecked   = "cluster-id-unchecked"
	BugLeaderUnwritten      = "leader-applies-unwritten"
	BugWALEmptiedOnInstall  = "wal-emptied-on-install"
	BugReadRaftApplied      = "read-raft-applied"
	BugRestoreIgnoresEpoch  = "restore-ignores-epoch"
	BugKeepAliveNoBeats     = "keepalive-no-heartbeats"
	BugLostVoterUnchecked   = "lost-voter-unchecked"
	BugLostFounderUnchecked = "lost-founder-unchecked"
	BugFounderVotesUnheld   = "founder-votes-unheld"
)

// plantedWriteDelay is how long the planted leader-applies-unwritten
// defect holds each write of the leader's log: a slow disk, so that what
// the leader answers early is often still unwritten when it dies.
const plantedWriteDelay = 100 * time.Millisecond

// The planted read-raft-applied defect stalls the leader's apply for
// plantedApplyHold at every plantedApplyEvery-th command entry: an apply
// goroutine that stalls (a GC, CPU starvation) while raft goes on
// committing what other clients propose, so that the followers apply and
// publish entries the leader's state does not have yet, and a read that
// takes raft's word answers without them.
const (
	plantedApplyHold  = 200 * time.Millisecond
	plantedApplyEvery = 16
)

// planted reports whether this node's knobs (Config.Testing) switch the
// defect name on: never in a release build.
func (n *Node) planted(name string) bool { return n.cfg.Testing.planted(name) }

// fsmOptions are the options of every fsm.State this node builds and of
// its log store's entry checks: the FSM's knobs.
func (n *Node) fsmOptions() []fsm.Option {
	return []fsm.Option{fsm.WithTestingKnobs(n.cfg.Testing.fsmKnobs())}
}

// wallNanos is the wall clock's reading: the fault clock's when c has one,
// else the system's. Only the planted wall-clock-time defect reads it.
func wallNanos(c Clock) int64 {
	if w, ok := c.(interface{ Wall() time.Time }); ok {
		return w.Wall().UnixNano()
	}
	return time.Now().UnixNano()
}

// resourceLeaseID is the planted lease-id-by-resource defect: the same id
// for every lease on a resource.
func resourceLeaseID(resource string) []byte {
	sum := sha256.Sum256([]byte(resource))
	return sum[:fsm.LeaseIDLen]
}

// ackEarly is the planted release-ack-before-commit and
// renew-ack-before-commit defects: a release or renewal of a live lease is
// answered from the local state as if done, and proposed afterwards (a
// renewal renewAckLead later) with nobody waiting for the commit. ok is
// false, and nothing happens, unless one of them is switched on and the
// lease is live.
func (s *leaseService) ackEarly(ctx context.Context, id []byte, cmd *fsmpb.Command) (res fsm.Result, ok bool) {
	release := cmd.GetRelease() != nil && s.n.planted(BugReleaseAckEarly)
	renew := cmd.GetRenew() != nil && s.n.planted(BugRenewAckEarly)
	if !release && !renew {
		return fsm.Result{}, false
	}
	var l fsm.Lease
	var live bool
	var now int64
	s.n.sm.read(func(st *fsm.State) {
		l, live = st.LeaseByID([fsm.LeaseIDLen]byte(id))
		now = st.Now()
	})
	if !live || now > l.ExpiresAt {
		return fsm.Result{}, false
	}
	var lead time.Duration
	res = fsm.Result{Released: true, Lease: l}
	if renew {
		lead = renewAckLead
		l.ExpiresAt = now + l.TTL
		res = fsm.Result{Lease: l, Remaining: time.Duration(l.TTL)}
	}
	go func() {
		time.Sleep(lead)
		_, _ = s.n.propose(context.WithoutCancel(ctx), cmd)
	}()
	return res, true
}

// renewAckLead is how far the planted renew-ack-before-commit answer runs
// ahead of its proposal: a leader killed or cut off within it loses
// renewals it acknowledged.
const renewAckLead = 200 * time.Millisecond
