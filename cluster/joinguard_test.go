package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A voter whose data dir was lost, started again with --join under its
// old id without a remove, is refused before raft runs: with an empty log
// it would grant its vote to any candidate. The cluster keeps its three
// members and the refused start leaves no identity or marker behind.
func TestALostVoterJoiningAgainIsRefused(t *testing.T) {
	tc, cfg, n, err := startLostVoter(t, nil)
	if err == nil {
		n.Close()
		t.Fatalf("%s started with an empty data dir although it is a voter", cfg.ID)
	}
	if !errors.Is(err, ErrLostVoter) {
		t.Fatalf("got %v, want ErrLostVoter", err)
	}
	for _, f := range []string{IdentityFile, JoinMarkerFile} {
		if _, serr := os.Stat(filepath.Join(cfg.DataDir, f)); serr == nil {
			t.Errorf("the refused start wrote %s", f)
		}
	}
	_, leader := tc.leader()
	fut := leader.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		t.Fatal(err)
	}
	if got := len(fut.Configuration().Servers); got != 3 {
		t.Fatalf("%d servers after the refused start, want 3", got)
	}
}

// startLostVoter stops a follower of a new cluster (tweaked) and starts it
// again with --join under its old id on an empty data dir, not removed.
func startLostVoter(t *testing.T, tweak func(*Config)) (*testCluster, Config, *Node, error) {
	tc := newTestCluster(t, 3, tweak)
	fi, _ := tc.follower()
	li, _ := tc.leader()
	tc.stop(fi)
	cfg := tc.cfgs[fi]
	cfg.DataDir, cfg.Bootstrap, cfg.Join = t.TempDir(), nil, tc.cfgs[li].Listen // the whole data dir lost
	cfg.Clock, cfg.Logger = nil, testLogger(t, cfg.ID+"-wiped")
	n, err := Start(cfg)
	return tc, cfg, n, err
}

// The replacement docs/OPERATIONS.md gives still works: remove the lost
// voter, then it joins with an empty data dir as a new member.
func TestALostVoterRemovedFirstJoinsAgain(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	fi, _ := tc.follower()
	li, leader := tc.leader()
	id := tc.cfgs[fi].ID
	tc.stop(fi)
	if err := leader.raft.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	cfg := tc.cfgs[fi]
	cfg.DataDir, cfg.Bootstrap, cfg.Join = t.TempDir(), nil, tc.cfgs[li].Listen
	cfg.Clock, cfg.Logger = nil, testLogger(t, id+"-new")
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("a removed node joining again: %v", err)
	}
	defer n.Close()
	eventually(t, 15*time.Second, id+" a voter again with the cluster's state", func() bool {
		got, err := readIdentity(cfg.DataDir)
		return err == nil && got != nil && n.raft.CurrentTerm() > 0
	})
}

// A node whose Join may have committed before the cluster's log reached
// it (its answer lost, the node restarted) is the same node, not a lost
// voter: its data dir has the marker its first start wrote, and it starts.
// Without the marker (the data dir wiped as a whole) it is refused.
func TestARestartBeforeTheLogArrivedIsNotALostVoter(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	li, _ := tc.leader()
	cfg := tc.joinerConfig(t, li, "n4")
	n4, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "n4 joined", func() bool {
		got, err := readIdentity(cfg.DataDir)
		return err == nil && got != nil
	})
	eventually(t, 5*time.Second, "the marker gone once the identity guards the data dir", func() bool {
		_, err := os.Stat(filepath.Join(cfg.DataDir, JoinMarkerFile))
		return os.IsNotExist(err)
	})
	n4.Close()
	// What a start that stopped right after its Join committed leaves:
	// the marker, no raft state, no identity.
	cfg.DataDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg.DataDir, JoinMarkerFile), []byte("node n4 asked to join\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t, "n4-restarted")
	again, err := Start(cfg)
	if err != nil {
		t.Fatalf("the restart with the marker: %v", err)
	}
	again.Close()
	cfg.DataDir = t.TempDir()
	cfg.Logger = testLogger(t, "n4-wiped")
	if n, err := Start(cfg); !errors.Is(err, ErrLostVoter) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a wiped n4: %v, want ErrLostVoter", err)
	}
}

// A first start told to join through its own address fails at once (it
// would wait for itself: it serves only once started).
func TestJoiningThroughItselfIsRefused(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	cfg := tc.joinerConfig(t, 0, "n2")
	cfg.Join = cfg.Listen
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := StartContext(ctx, cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node joining through itself started")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "own address") {
		t.Fatalf("got %v (context %v), want a refusal naming its own address at once", err, ctx.Err())
	}
}
