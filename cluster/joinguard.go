package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// JoinMarkerFile is written into a data dir, before its first Join, by a
// node that found it was not a voter yet (checkNotALostVoter). A restart
// that finds it and no Raft state is the same node, whose Join may have
// committed before the cluster's log reached it: it is not checked again.
const JoinMarkerFile = "join-started"

// ErrLostVoter refuses a first start with --join, on a data dir without
// Raft state, of a node that the cluster counts as a voter: its data dir
// was lost. A voter with an empty log grants its vote to any candidate, so
// two nodes with it could elect one that lacks entries the cluster
// committed (on the lost log and a third node), and tokens would be
// issued again. Remove it first; then it joins as a new member.
var ErrLostVoter = errors.New("cluster: this node is a voter already and started on an empty data dir: its data was lost")

// checkNotALostVoter runs before raft at a first start that joins (no
// Raft state, no identity, no bootstrap list): unless the data dir has
// JoinMarkerFile, it asks the leader (through the join target's Status,
// which names it; a follower's own list may not have a removal applied
// yet, or may not have the member at all) whether this node's id is a
// voter, and refuses (ErrLostVoter, raft never started) when it is;
// otherwise it writes the marker and the start goes on. Until a leader
// answers with a configuration it waits, within ctx: a node that joins can
// do nothing before (it has no state and no membership), and one that
// went on unasked could be a lost voter, voting.
func (n *Node) checkNotALostVoter(ctx context.Context) error {
	dir := n.cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, JoinMarkerFile)); err == nil {
		return nil
	}
	if n.cfg.Join == n.addr || n.cfg.Join == n.cfg.Listen {
		return fmt.Errorf("cluster: --join %s is this node's own address: join through a running member", n.cfg.Join)
	}
	lastWarn := time.Now()
	for {
		st, err := n.leaderStatus(ctx)
		if err == nil {
			if m := voterEntry(st, n.cfg.ID); m != nil {
				return fmt.Errorf("%w: the leader %s lists node %q at %s as a voter. Remove it first (leasectl members remove %s), then start it again with --join (docs/OPERATIONS.md, Replacing a dead node)",
					ErrLostVoter, st.Id, m.Id, m.Addr, m.Id)
			}
			marker := fmt.Sprintf("node %s asked to join through %s at %s; the leader %s did not count it as a voter\n",
				n.cfg.ID, n.cfg.Join, time.Now().UTC().Format(time.RFC3339), st.Id)
			if err := writeDurably(dir, JoinMarkerFile, []byte(marker)); err != nil {
				return fmt.Errorf("cluster: %s: %w", JoinMarkerFile, err)
			}
			return nil
		}
		if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
			return fmt.Errorf("cluster: ask the join target %s whether this node is a voter already: %w", n.cfg.Join, err)
		}
		if time.Since(lastWarn) >= 10*time.Second {
			lastWarn = time.Now()
			n.log.Warn("waiting for the leader through the join target: a first start that joins asks it whether this node is a voter already before raft runs",
				"via", n.cfg.Join, "error", err)
		}
		select {
		case <-ctx.Done():
			return started(ctx)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// errNoLeaderAnswer: the join target knows no leader, or the leader's
// answer holds no configuration yet.
var errNoLeaderAnswer = errors.New("no leader's configuration yet")

// leaderStatus returns the leader's status, asked through the join target
// (the target's own when it leads).
func (n *Node) leaderStatus(ctx context.Context) (*api.StatusResponse, error) {
	st, _, err := n.askStatus(ctx, n.cfg.Join)
	if err != nil {
		return nil, err
	}
	if st.State != "leader" {
		if st.LeaderAddr == "" {
			return nil, errNoLeaderAnswer
		}
		if st, _, err = n.askStatus(ctx, st.LeaderAddr); err != nil {
			return nil, err
		}
	}
	if st.State != "leader" || len(st.Members) == 0 {
		return nil, errNoLeaderAnswer
	}
	return st, nil
}

// voterEntry returns id's entry in st's members when it is a voter.
func voterEntry(st *api.StatusResponse, id string) *api.Member {
	for _, m := range st.Members {
		if m.Id == id && m.Suffrage == "voter" {
			return m
		}
	}
	return nil
}
