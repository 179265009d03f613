package cluster

import (
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"
)

// A follower that has not heard from its leader for the heartbeat timeout
// should say so at once. hashicorp/raft checks a follower's last contact
// only when a timer drawn between one and two heartbeat timeouts fires,
// and a voter refuses pre-votes while it still knows a leader, so after a
// leader dies the election waits for the later of the two followers'
// draws: a median of about 1.0 s, up to 1.4 s, with the 500 ms default
// (docs/PERFORMANCE.md, "Failover"). watchLeaderContact checks every
// twentieth of the heartbeat timeout and, once the leader has been silent
// for the heartbeat timeout plus a random fifth of it (a fresh draw for
// each silence, so the two followers rarely start together), fires raft's
// own check now. Raft still decides by its own rule (an election only if
// its last contact is older than the heartbeat timeout), so this changes
// when the check runs, never what it concludes; and pre-vote keeps a lone
// starved follower from disturbing a leader the others still hear.

// leaderContactChecks is how many checks watchLeaderContact makes per
// heartbeat timeout.
const leaderContactChecks = 20

// watchLeaderContact runs until stop is closed. It needs a leader lease
// timeout below the heartbeat timeout (raft refuses a configuration with
// the heartbeat timeout below it, and the nudge lowers the heartbeat
// timeout by a millisecond); otherwise raft's timer alone decides.
func (n *Node) watchLeaderContact(stop <-chan struct{}) {
	ht := n.cfg.HeartbeatTimeout
	if n.cfg.LeaderLeaseTimeout > ht-time.Millisecond {
		return
	}
	t := time.NewTicker(ht / leaderContactChecks)
	defer t.Stop()
	var silence silenceWatch
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		leader, _ := n.raft.LeaderWithID()
		if silence.due(n.raft.State() == raft.Follower && leader != "", n.raft.LastContact(), time.Now(), ht) {
			n.log.Info("no contact from the leader for longer than the heartbeat timeout; checking now",
				"leader", leader, "last-contact", time.Since(n.raft.LastContact()).Round(time.Millisecond))
			n.nudgeHeartbeatCheck()
		}
	}
}

// silenceWatch decides, one check at a time, when a follower's silence
// from its leader is long enough to act on: once per silence (a silence
// is known by the last contact it follows), after the heartbeat timeout
// plus a random fifth of it.
type silenceWatch struct {
	since time.Time     // the last contact the current silence follows
	wait  time.Duration // how long this silence may last before acting
	acted bool
	// jitter draws the extra wait in [0, max); nil: math/rand.
	jitter func(max time.Duration) time.Duration
}

func (s *silenceWatch) due(following bool, lastContact, now time.Time, ht time.Duration) bool {
	if !following || lastContact.IsZero() {
		return false
	}
	if !lastContact.Equal(s.since) {
		draw := rand.N[time.Duration]
		if s.jitter != nil {
			draw = s.jitter
		}
		extra := draw(ht / 5)
		s.since, s.wait, s.acted = lastContact, ht+extra, false
	}
	if s.acted || now.Sub(lastContact) < s.wait {
		return false
	}
	s.acted = true
	return true
}

// nudgeHeartbeatCheck makes a follower run raft's heartbeat check now:
// lowering the heartbeat timeout wakes raft's follower loop, which then
// fires its timer at once; the timeout goes back straight after (raft
// reads it again when the timer fires, and the silence already exceeds
// it either way).
func (n *Node) nudgeHeartbeatCheck() {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	rc := n.raft.ReloadableConfig()
	ht := rc.HeartbeatTimeout
	rc.HeartbeatTimeout = ht - time.Millisecond
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Debug("cannot nudge raft's heartbeat check", "error", err)
		return
	}
	rc.HeartbeatTimeout = ht
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("cannot restore the heartbeat timeout after a nudge", "heartbeat-timeout", ht, "error", err)
	}
}
