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
var ErrLostVoter = errors.New("cluster: this node is a voter already and its data dir holds no raft state: its data was lost")

// checkNotALostVoter runs before raft at a first start that joins (no
// Raft state, no identity, no bootstrap list): unless the data dir has
// JoinMarkerFile, it asks the join target's Status for the members (and,
// when the target is a follower that lists this node as a voter, the
// leader's, as a follower may not have applied a removal yet) and
// refuses (ErrLostVoter, raft never started) when this node's id is a
// voter among them; otherwise it writes the marker and the start goes
// on. It waits, within ctx, until the target answers: a node that joins
// can do nothing before (it has no state and no membership), and one
// that went on unasked could be a lost voter, voting.
func (n *Node) checkNotALostVoter(ctx context.Context) error {
	dir := n.cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, JoinMarkerFile)); err == nil {
		return nil
	}
	for attempt := 0; ; attempt++ {
		st, err := n.askStatus(ctx, n.cfg.Join)
		if err == nil {
			m := voterEntry(st, n.cfg.ID)
			if m != nil && st.State != "leader" && st.LeaderAddr != "" && st.LeaderAddr != n.cfg.Join {
				if lst, lerr := n.askStatus(ctx, st.LeaderAddr); lerr == nil {
					st, m = lst, voterEntry(lst, n.cfg.ID)
				}
			}
			if m != nil {
				return fmt.Errorf("%w: %s lists node %q at %s as a voter. Remove it first (leasectl members remove %s), then start it again with --join (docs/OPERATIONS.md, Replacing a dead node)",
					ErrLostVoter, st.Id, m.Id, m.Addr, m.Id)
			}
			marker := fmt.Sprintf("node %s asked %s to join at %s; it was not a voter then\n", n.cfg.ID, n.cfg.Join, time.Now().UTC().Format(time.RFC3339))
			if err := writeDurably(dir, JoinMarkerFile, []byte(marker)); err != nil {
				return fmt.Errorf("cluster: %s: %w", JoinMarkerFile, err)
			}
			return nil
		}
		if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
			return fmt.Errorf("cluster: ask the join target %s whether this node is a voter already: %w", n.cfg.Join, err)
		}
		if attempt%40 == 0 {
			n.log.Warn("waiting for the join target: a first start that joins asks it whether this node is a voter already before raft runs",
				"via", n.cfg.Join, "error", err)
		}
		select {
		case <-ctx.Done():
			return started(ctx)
		case <-time.After(250 * time.Millisecond):
		}
	}
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

// askStatus asks the node at addr for its status (2 s at most).
func (n *Node) askStatus(ctx context.Context, addr string) (*api.StatusResponse, error) {
	conn, err := n.fwd.conn(addr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return api.NewClusterServiceClient(conn).Status(cctx, &api.StatusRequest{})
}
