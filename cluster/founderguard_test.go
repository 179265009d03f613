package cluster

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// waitServed waits until the leader's state records every id as having
// served.
func waitServed(t *testing.T, tc *testCluster, ids ...string) {
	t.Helper()
	_, leader := tc.leader()
	eventually(t, 15*time.Second, "the leader records "+strings.Join(ids, ",")+" as having served", func() bool {
		var got []string
		leader.sm.read(func(st *fsm.State) { got = st.Served() })
		for _, id := range ids {
			if !slices.Contains(got, id) {
				return false
			}
		}
		return true
	})
}

// startLostFounder stops a follower of a new cluster (tweaked) once the
// leader records every founder as having served, and starts it again with
// its bootstrap list on an empty data dir.
func startLostFounder(t *testing.T, tweak func(*Config)) (*testCluster, Config, *Node, error) {
	tc := newTestCluster(t, 3, tweak)
	waitServed(t, tc, "n1", "n2", "n3")
	fi, _ := tc.follower()
	tc.stop(fi)
	cfg := tc.cfgs[fi]
	cfg.DataDir = t.TempDir() // the whole data dir lost; --bootstrap kept
	cfg.Clock, cfg.Logger = nil, testLogger(t, cfg.ID+"-wiped")
	n, err := Start(cfg)
	return tc, cfg, n, err
}

// A founder whose data dir was lost, started again with its bootstrap
// list, is refused before raft runs: with an empty log it would grant its
// vote to any candidate. The refused start leaves no identity behind, and
// the cluster keeps serving.
func TestALostFounderStartedWithItsBootstrapListIsRefused(t *testing.T) {
	tc, cfg, n, err := startLostFounder(t, nil)
	if err == nil {
		n.Close()
		t.Fatalf("%s started with an empty data dir although the cluster records it as having served", cfg.ID)
	}
	if !errors.Is(err, ErrLostVoter) {
		t.Fatalf("got %v, want ErrLostVoter", err)
	}
	if _, serr := os.Stat(filepath.Join(cfg.DataDir, IdentityFile)); serr == nil {
		t.Errorf("the refused start wrote %s", IdentityFile)
	}
	// Refused again at the next try: the refusal wrote no state.
	if n, err := Start(cfg); !errors.Is(err, ErrLostVoter) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("second start: got %v, want ErrLostVoter", err)
	}
	ctx := ctxT(t)
	if _, err := tc.client(0).Acquire(ctx, acquireReq("jobs/after", 5*time.Second)); err != nil {
		if _, err := tc.client(2).Acquire(ctx, acquireReq("jobs/after", 5*time.Second)); err != nil {
			t.Fatalf("the cluster stopped serving after the refused start: %v", err)
		}
	}
}

// A wiped founder that finds a founder holding the cluster's log but no
// ready leader waits: the peer restarted alone knows neither its commit
// index nor, until a leader applies its log, whom it recorded (its
// snapshot may predate that). Once a leader is back, the start is refused.
func TestALostFounderWaitsWhileNoLeaderAnswers(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	waitServed(t, tc, "n1", "n2", "n3")
	tc.close() // every node down
	cfg := tc.cfgs[2]
	cfg.DataDir = t.TempDir() // n3's data dir lost
	cfg.Clock, cfg.Logger = nil, testLogger(t, "n3-wiped")
	tc.start(0) // n1 alone: the whole log, no quorum
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if n, err := StartContext(ctx, cfg); err == nil || errors.Is(err, ErrLostVoter) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("with n1 up alone, the wiped n3's start ended with %v, want it to wait until its context ended", err)
	}
	tc.start(1)
	tc.leader()
	if n, err := Start(cfg); !errors.Is(err, ErrLostVoter) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("with a leader back: got %v, want ErrLostVoter", err)
	}
}

// A founder that starts for the first time after the others formed the
// cluster is not a lost one: it starts, and the leader then records it.
func TestAFounderStartingLateStarts(t *testing.T) {
	late := freeAddrs(t, 1)[0]
	var boot map[string]string
	tc := newTestCluster(t, 3, func(c *Config) {
		if boot == nil {
			boot = maps.Clone(c.Bootstrap)
			boot["n4"] = late // four founders; three form the cluster
		}
		c.Bootstrap = boot
	})
	waitServed(t, tc, "n1", "n2", "n3")
	cfg := tc.cfgs[0]
	cfg.ID, cfg.Listen, cfg.DataDir = "n4", late, t.TempDir()
	cfg.Clock, cfg.Logger = nil, testLogger(t, "n4")
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("a founder starting late: %v", err)
	}
	defer n.Close()
	waitServed(t, tc, "n4")
	eventually(t, 15*time.Second, "n4 holds the cluster's log", func() bool { return n.AppliedIndex() > 2 })
}

// A restore seeds a state that records nobody: the backup's members served
// the old cluster, not the new one. A founder of the restored cluster that
// starts after the others formed it (three of four) starts, also one
// whose id served the old cluster.
func TestARestoredFounderStartingLateStarts(t *testing.T) {
	old := newTestCluster(t, 3, nil)
	waitServed(t, old, "n1", "n2", "n3")
	backup := saveBackup(t, old, 0)
	old.close()
	tc := configTestCluster(t, 4, func(c *Config) { c.RestoreFrom, c.RestoreEpoch = backup, EpochBase })
	tc.start(0)
	tc.start(1)
	tc.start(3)
	waitServed(t, tc, "n1", "n2", "n4")
	_, leader := tc.leader()
	var served []string
	leader.sm.read(func(st *fsm.State) { served = st.Served() })
	if slices.Contains(served, "n3") {
		t.Fatalf("the restored state records %v as having served, n3 included, before n3 started", served)
	}
	tc.start(2) // fails the test if refused
	waitServed(t, tc, "n3")
}

// The state hash replicas compare leaves the served nodes out: a replica
// of the version before them skips their entries, and in a rolling
// upgrade it must not be taken for corrupt (nor take the others for it).
func TestTheStateHashLeavesOutTheServedNodes(t *testing.T) {
	with, without := fsm.New(), fsm.New()
	entry, err := fsm.EncodeNodeServed("n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := with.Apply(entry); err != nil {
		t.Fatal(err)
	}
	a, err := hashSnapshot(with.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	b, err := hashSnapshot(without.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("a state that recorded a served node hashes unlike the same leases without it")
	}
}

// A wiped founder that starts while every other node is down finds no one
// to ask: it cannot tell that from a cluster forming, so it starts holding
// its votes (with its empty log it would grant one to any candidate, one
// lacking committed entries included). Once the others are back and
// answer, it stops with ErrLostVoter, and so does every later start of
// its data dir.
func TestALostFounderStartingWhileEveryNodeIsDownHoldsItsVotesThenStops(t *testing.T) {
	tc, cfg, n := startLostFounderAlone(t, nil)
	st, err := n.ClusterServer().Status(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.VotesHeld {
		t.Errorf("n3 started alone on an empty data dir with its votes free")
	}
	tc.start(0)
	tc.start(1)
	eventually(t, 15*time.Second, "n3 stops once its founders answer", func() bool { return n.Err() != nil })
	if err := n.Err(); !errors.Is(err, ErrLostVoter) {
		t.Fatalf("n3 stopped with %v, want ErrLostVoter", err)
	}
	if _, leader := tc.leader(); leader.ID() == "n3" {
		t.Fatal("n3 leads")
	}
	// Its data dir now holds raft state and an identity; the file that
	// says it never learned whether it served makes the next start ask
	// again, and it is stopped again.
	again, err := Start(cfg)
	if err != nil {
		if !errors.Is(err, ErrLostVoter) {
			t.Fatalf("second start: %v", err)
		}
		return
	}
	defer again.Close()
	eventually(t, 15*time.Second, "n3 stops again", func() bool { return again.Err() != nil })
	if err := again.Err(); !errors.Is(err, ErrLostVoter) {
		t.Fatalf("second start stopped with %v, want ErrLostVoter", err)
	}
}

// startLostFounderAlone stops every node of a new cluster (tweaked) once
// the leader recorded them all, and starts n3 alone again with its
// bootstrap list on an empty data dir.
func startLostFounderAlone(t *testing.T, tweak func(*Config)) (*testCluster, Config, *Node) {
	tc := newTestCluster(t, 3, tweak)
	waitServed(t, tc, "n1", "n2", "n3")
	tc.close() // every node down
	cfg := tc.cfgs[2]
	cfg.DataDir = t.TempDir() // n3's data dir lost; it starts first
	cfg.Clock, cfg.Logger = nil, testLogger(t, "n3-wiped")
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("n3 alone on an empty data dir: %v (it cannot know yet)", err)
	}
	t.Cleanup(func() { n.Close() })
	return tc, cfg, n
}

// Founders started one after another: each finds too few founders with
// nothing past the founding entry and holds its votes until all three
// are up (with one of them perhaps a founder whose data was lost, two are
// no proof that the cluster never formed). Then the cluster forms,
// records all three, and no file is left behind.
func TestFoundersStartedOneByOneReleaseTheirVotes(t *testing.T) {
	tc := configTestCluster(t, 3, nil)
	tc.start(0)
	tc.start(1)
	time.Sleep(4 * tc.cfgs[0].ElectionTimeout) // election rounds pass: none may elect
	for i := range 2 {
		if n := tc.nodes[i]; !n.tr.VotesHeld() || n.IsLeader() {
			t.Fatalf("%s, with two founders of three up on empty data dirs: votes held %v, leads %v", n.ID(), n.tr.VotesHeld(), n.IsLeader())
		}
	}
	tc.start(2)
	tc.leader()
	waitServed(t, tc, "n1", "n2", "n3")
	for i, c := range tc.cfgs {
		if tc.nodes[i].tr.VotesHeld() {
			t.Errorf("%s still holds its votes", c.ID)
		}
		if _, err := os.Stat(filepath.Join(c.DataDir, FounderHoldFile)); err == nil {
			t.Errorf("%s kept %s", c.ID, FounderHoldFile)
		}
	}
}

// A founder removed from the cluster, then started again with its
// bootstrap list on an empty data dir, is refused too (the cluster still
// records it as having served), but not told to remove it first.
func TestARemovedFounderStartedWithItsBootstrapListIsToldToJoin(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	waitServed(t, tc, "n1", "n2", "n3")
	fi, _ := tc.follower()
	cfg := tc.cfgs[fi]
	tc.stop(fi)
	_, leader := tc.leader()
	if _, err := leader.admin.Remove(ctxT(t), &api.RemoveRequest{Id: cfg.ID}); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	cfg.Clock, cfg.Logger = nil, testLogger(t, cfg.ID+"-wiped")
	n, err := Start(cfg)
	if err == nil {
		n.Close()
		t.Fatalf("%s started with its bootstrap list after its removal", cfg.ID)
	}
	if !errors.Is(err, ErrLostVoter) || !strings.Contains(err.Error(), "no longer a member") || strings.Contains(err.Error(), "Remove it first") {
		t.Fatalf("got %v, want ErrLostVoter saying it is no longer a member", err)
	}
}

// Two founders of three, with the third away, do not form the cluster: on
// the code before they did, and after an outage that cost one of them its
// data, it and the third (both with nothing past the founding entry)
// vouched for each other and elected a leader with an empty log while
// the node holding the log was down. Founders restarted while holding
// their votes still count: once the third is back, all three form it.
func TestTwoFoundersOfThreeDoNotFormTheClusterWhileTheThirdIsAway(t *testing.T) {
	tc := configTestCluster(t, 3, nil)
	tc.start(2)
	tc.stop(2) // n3's first start cut short: it keeps its file
	tc.start(0)
	tc.start(1)
	time.Sleep(4 * tc.cfgs[0].ElectionTimeout) // election rounds pass: none may elect
	if tc.nodes[0].IsLeader() || tc.nodes[1].IsLeader() || !tc.nodes[0].tr.VotesHeld() || !tc.nodes[1].tr.VotesHeld() {
		t.Fatal("n1 and n2 formed the cluster while n3, a founder, was away")
	}
	tc.close()
	for i := range tc.cfgs { // every founder restarted while holding its votes
		tc.start(i)
	}
	tc.leader()
	waitServed(t, tc, "n1", "n2", "n3")
	for i, c := range tc.cfgs {
		if tc.nodes[i].tr.VotesHeld() {
			t.Errorf("%s still holds its votes", c.ID)
		}
	}
}
