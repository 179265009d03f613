package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/raft"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// servedPoll is how often a leader looks for members its state does not
// yet record as having served (recordServedLoop).
const servedPoll = time.Second

// FounderHoldFile is written into a data dir, before raft first runs, by
// a founder that starts holding its votes (holdVotes); it is removed, the
// write synced, before the votes are released. A restart that finds it
// holds them again and asks again: the start that wrote it did not know
// whether its data was lost.
const FounderHoldFile = "founder-votes-held"

// checkNotALostFounder runs before raft at a first start with a bootstrap
// list (no Raft state, no identity). A founder whose data dir was wiped
// and that starts again with its --bootstrap list cannot tell itself from
// a founder that starts late: both have nothing. The cluster remembers:
// its leader records every member that answers Status with the cluster's
// id (recordServedLoop, an EntryNodeServed entry), and every node's Status
// lists them. So it asks the other founders (and the leader one of them
// names) for their status:
//
//   - any answer of this cluster (the cluster id this start would found)
//     that lists this node's id as served refuses the start (ErrLostVoter,
//     raft never started): a node it counted once with a log would now
//     grant its vote to any candidate;
//   - otherwise a ready leader's answer (its term's barrier applied: its
//     state holds every committed entry) lets it start: a founder
//     starting late;
//   - no answer from a node that holds this cluster's log past its
//     founding entry (its last log index, which survives its restarts,
//     unlike its commit index) lets it start: the cluster may be forming.
//     Unless enough founders answered with nothing past it (forming),
//     it cannot tell that from a cluster whose every node is down and
//     whose others have not come back yet: it starts holding its votes
//     (hold), and watchFounders asks on until they answer. A rule that
//     waited here instead would block a process that starts its founders
//     one after another. When founders refused the call for lack
//     of permission (a policy without peer certificates, where nodes
//     cannot ask each other and the leader records no one) the guard is
//     blind: it starts, with a warning;
//   - an answer refused for lack of permission otherwise ends the start;
//   - otherwise it waits, within ctx.
//
// What it leaves: a founder wiped before the leader recorded it (within
// about servedPoll of its first start), and one whose founders were
// replaced at other addresses: it cannot reach them. etcd's check of a
// member's published attributes leaves the same.
func (n *Node) checkNotALostFounder(ctx context.Context) (hold bool, err error) {
	want, err := n.foundingID()
	if err != nil {
		return false, err
	}
	lastWarn := time.Now()
	for {
		v := n.askFounders(ctx, want, n.cfg.Bootstrap)
		switch v.verdict(len(n.cfg.Bootstrap)) {
		case founderLost:
			return false, n.lostFounder(v.servedBy, false)
		case founderLate:
			n.log.Info("founder starts late: the leader does not record this node as having served", "leader", v.leader.Id)
			return false, nil
		case founderBlind:
			n.logBlind(v)
			return false, nil
		case founderForming:
			return false, nil
		case founderUnsure:
			return !n.planted(BugFounderVotesUnheld), nil
		case founderDenied:
			return false, fmt.Errorf("cluster: ask the other founders whether this node served already: %w", v.denied)
		}
		if time.Since(lastWarn) >= 10*time.Second {
			lastWarn = time.Now()
			n.log.Warn("waiting for the leader: a founder starting on an empty data dir asks it whether this node served already before raft runs, and the cluster it founded holds state")
		}
		select {
		case <-ctx.Done():
			return false, started(ctx)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// lostFounder is the refusal of a founder that st lists as having served.
// It tells a member that was removed already (st's members, when it
// knows them, lack it) only to start again with --join; a node that ran
// (stopped by watchFounders) to empty its data dir first, which now holds
// what this start wrote.
func (n *Node) lostFounder(st *api.StatusResponse, ran bool) error {
	next := fmt.Sprintf("Remove it first (leasectl members remove %s), then", n.cfg.ID)
	if len(st.Members) > 0 && !slices.ContainsFunc(st.Members, func(m *api.Member) bool { return m.Id == n.cfg.ID }) {
		next = "It is no longer a member there:"
	}
	if ran {
		next += " empty its data dir " + n.cfg.DataDir + " (it holds only what this start wrote) and"
	}
	return fmt.Errorf("%w: node %s (%s) of this cluster records node %q as having served. %s start it again with --join and without --bootstrap (docs/OPERATIONS.md, Replacing a dead node)",
		ErrLostVoter, st.Id, st.Addr, n.cfg.ID, next)
}

// holdVotes runs before raft: it reports whether this start holds its
// votes (transport.HoldVotes, set here) and has watchFounders ask the
// founders on. So does every start that finds FounderHoldFile, and a first
// start with a bootstrap list that checkNotALostFounder lets start without
// knowing whether this node served (it writes the file first).
func (n *Node) holdVotes(ctx context.Context, rs raftStores, ident *Identity) (bool, error) {
	if n.planted(BugLostFounderUnchecked) {
		return false, nil
	}
	dir := n.cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, FounderHoldFile)); err == nil {
		n.tr.HoldVotes(true)
		n.log.Warn("votes held: an earlier start of this founder did not learn whether it served in this cluster before", "file", filepath.Join(dir, FounderHoldFile))
		return true, nil
	}
	if rs.existing || ident != nil || len(n.cfg.Bootstrap) == 0 {
		return false, nil
	}
	hold, err := n.checkNotALostFounder(ctx)
	if err != nil || !hold {
		return false, err
	}
	note := fmt.Sprintf("founder %s started on an empty data dir at %s before enough of its founders answered: it holds its votes until they say whether it served\n",
		n.cfg.ID, time.Now().UTC().Format(time.RFC3339))
	if err := writeDurably(dir, FounderHoldFile, []byte(note)); err != nil {
		return false, fmt.Errorf("cluster: %s: %w", FounderHoldFile, err)
	}
	n.tr.HoldVotes(true)
	n.log.Warn("votes held: too few founders answer; this node cannot tell a cluster forming from one whose nodes are all down with its own data lost, and votes once they answer (a forming cluster of three: once all three are up)")
	return true, nil
}

// watchFounders runs while this node holds its votes (holdVotes). Every
// founderPoll it asks the voters of its configuration, as
// checkNotALostFounder asks the founders: an answer listing this node as
// having served, or its own state doing so (the log it took from a
// leader), stops the node (ErrLostVoter, through Err; FounderHoldFile
// stays, so every restart is stopped too); a ready leader's answer, or
// enough voters with nothing past the founding entry (forming: this node
// included) release the votes (the file is removed first); founders that
// refuse the call
// for lack of permission (the guard is blind) release them with a
// warning. A node holding its votes neither grants nor asks for one, so
// until then the cluster needs a majority of the others.
func (n *Node) watchFounders() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	lastWarn := time.Now()
	for {
		select {
		case <-n.stopCh:
			return
		case <-time.After(founderPoll):
		}
		var self bool
		n.sm.read(func(st *fsm.State) { self = st.HasServed(n.cfg.ID) })
		if self {
			go n.onFatal(n.lostFounder(&api.StatusResponse{Id: n.cfg.ID, Addr: n.addr}, true))
			return
		}
		why := ""
		peers, voters := n.votingPeers()
		v := n.askFounders(ctx, n.ClusterID(), peers)
		switch v.verdict(voters) {
		case founderLost:
			go n.onFatal(n.lostFounder(v.servedBy, true))
			return
		case founderLate:
			why = "the leader " + v.leader.Id + " does not record this node as having served"
		case founderBlind:
			n.logBlind(v)
			why = "the guard is blind (permission denied)"
		case founderForming:
			why = "enough voters hold nothing past the founding entry: the cluster is forming"
		}
		if why == "" {
			if time.Since(lastWarn) >= 10*time.Second {
				lastWarn = time.Now()
				n.log.Warn("votes held: waiting for the other founders to answer whether this node served in this cluster before")
			}
			continue
		}
		if err := removeDurably(n.cfg.DataDir, FounderHoldFile); err != nil {
			n.log.Warn("votes still held: remove "+FounderHoldFile, "error", err)
			continue
		}
		n.tr.HoldVotes(false)
		n.log.Info("votes released", "why", why)
		return
	}
}

// founderPoll is how often watchFounders asks.
const founderPoll = 250 * time.Millisecond

// votingPeers returns the other voters of this node's configuration (id to
// address) and how many voters it has.
func (n *Node) votingPeers() (map[string]string, int) {
	peers := map[string]string{}
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return peers, 0
	}
	voters := 0
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(srv.ID) != n.cfg.ID {
			peers[string(srv.ID)] = string(srv.Address)
		}
	}
	return peers, voters
}

// foundingID is the cluster id this first start would found: the bootstrap
// list's, with the backup's seed when it restores.
func (n *Node) foundingID() (string, error) {
	if n.cfg.RestoreFrom == "" {
		return clusterIDOf(n.cfg.Bootstrap, ""), nil
	}
	data, err := os.ReadFile(n.cfg.RestoreFrom)
	if err != nil {
		return "", err
	}
	return clusterIDOf(n.cfg.Bootstrap, n.restoreSeed(data)), nil
}

// founderView is what the other founders said (askFounders).
type founderView struct {
	servedBy *api.StatusResponse // an answer listing this node as served
	leader   *api.StatusResponse // a ready leader's answer
	formed   bool                // an answer of a cluster past its founding
	fresh    map[string]bool     // ids of founders that answered with nothing of this cluster past the founding entry
	denied   error               // PermissionDenied or Unauthenticated
}

// founderVerdict is what the founders' answers decide (verdict).
type founderVerdict int

const (
	founderWait    founderVerdict = iota // a founder holds the log, no ready leader answered: ask again
	founderLost                          // an answer lists this node as having served: its data was lost
	founderLate                          // a ready leader does not list it: a founder starting late
	founderBlind                         // none holds the log, and founders refuse the call for lack of permission
	founderForming                       // none holds the log, and enough hold nothing (forming)
	founderUnsure                        // none holds the log, too few answered: hold the votes
	founderDenied                        // a founder holds the log, and founders refuse the call
)

// verdict decides on v for a cluster of founders voters: the one table of
// checkNotALostFounder (before raft) and watchFounders (while the votes
// are held).
func (v founderView) verdict(founders int) founderVerdict {
	switch {
	case v.servedBy != nil:
		return founderLost
	case v.leader != nil:
		return founderLate
	case !v.formed && v.denied != nil:
		return founderBlind
	case !v.formed && v.forming(founders):
		return founderForming
	case !v.formed:
		return founderUnsure
	case v.denied != nil:
		return founderDenied
	}
	return founderWait
}

// logBlind warns that founders refuse this node's status call while none
// holds the log: a policy without peer certificates (plaintext), where
// founders cannot ask each other and the leader records no one. The guard
// cannot work there.
func (n *Node) logBlind(v founderView) {
	n.log.Warn("founders refuse this node's status call: it cannot check whether it served already", "error", v.denied)
}

// forming reports whether enough of founders voters hold nothing past the
// founding entry (the ones that answered so, and this node) for the
// cluster to be forming: so many that, with one of them a founder whose
// data was lost, the others still meet every majority. A cluster that
// committed anything holds it on a majority, so it never had one, and no
// vote can elect a leader missing an entry. That is every founder of
// two or three, three of four, four of five (n - n/2 + 1): a forming
// cluster of three votes once all three are up, as Consul's servers wait
// for bootstrap_expect. A majority would not do: a founder wiped and one
// that never started would be two of three, electing an empty leader
// while the node holding the log is down.
func (v founderView) forming(founders int) bool {
	need := min(founders, founders-founders/2+1)
	return founders > 0 && len(v.fresh)+1 >= need // 0: no configuration to go by
}

// askFounders asks every other founder in founders (id to address), and a
// leader one of them names, for its status, and keeps the answers of the
// cluster whose id is want.
func (n *Node) askFounders(ctx context.Context, want string, founders map[string]string) founderView {
	v := founderView{fresh: map[string]bool{}}
	asked := map[string]bool{n.addr: true, n.cfg.Listen: true}
	var addrs []string
	for id, addr := range founders {
		if id != n.cfg.ID {
			addrs = append(addrs, addr)
		}
	}
	slices.Sort(addrs)
	for i := 0; i < len(addrs); i++ {
		addr := addrs[i]
		if asked[addr] {
			continue
		}
		asked[addr] = true
		st, id, err := n.askStatus(ctx, addr)
		if err != nil {
			if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
				v.denied = err
			}
			continue
		}
		founder := st.Id != n.cfg.ID && founders[st.Id] == addr
		if id != want {
			if id != "" && founder {
				// The founder at its address runs another cluster (a
				// restore with another epoch, say): it holds none of
				// this one's log (or is the one node that lost it).
				v.fresh[st.Id] = true
			}
			continue // or a node with no identity yet: it may hold the log
		}
		if slices.Contains(st.Served, n.cfg.ID) {
			v.servedBy = st
			return v
		}
		if len(st.Served) > 0 || st.LastLogIndex > 1 {
			v.formed = true
		} else if founder {
			v.fresh[st.Id] = true // by id: one node reached at two addresses counts once
		}
		if st.State == "leader" {
			if st.LeaderReady {
				v.leader = st
			}
		} else if st.LeaderAddr != "" {
			addrs = append(addrs, st.LeaderAddr) // perhaps a member that joined
		}
	}
	return v
}

// askStatus asks the node at addr for its status and the cluster id its
// answer's header carries (2 s at most), over a connection of its own
// (forwarder.dialOnce: the node asked may not be up, and a kept connection
// whose dial failed would fail the node's forwarded calls for a while).
func (n *Node) askStatus(ctx context.Context, addr string) (*api.StatusResponse, string, error) {
	conn, err := n.fwd.dialOnce(addr)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var hdr metadata.MD
	st, err := api.NewClusterServiceClient(conn).Status(cctx, &api.StatusRequest{}, grpc.Header(&hdr))
	if err != nil {
		return nil, "", err
	}
	return st, clusterID(hdr), nil
}

// recordServedLoop runs while this node leads in ls's term: it records
// (EntryNodeServed) every member its state does not list yet as having
// served, itself at once and another once that member answers Status with
// this cluster's id. Recorded, a founder started again with its bootstrap
// list on a wiped data dir is refused (checkNotALostFounder). Entries are
// proposed one at a time, only while members are missing: an idle
// cluster whose members are all recorded proposes nothing.
func (n *Node) recordServedLoop(ls *leaderState) {
	for {
		n.recordServed(ls)
		select {
		case <-ls.ctx.Done():
			return
		case <-n.stopCh:
			return
		case <-time.After(servedPoll):
		}
	}
}

// recordServed is one round of recordServedLoop: the members not yet
// recorded are asked at once (one that does not answer delays none of
// the others by more than the round), then recorded one by one. A member
// that answers with its votes held (itself included) is not recorded: it
// has not learned yet whether it served before this start, and being
// recorded now would make its own watch (watchFounders) take it for a
// lost founder.
func (n *Node) recordServed(ls *leaderState) {
	cluster := n.ClusterID()
	if cluster == "" {
		return // a data dir older than identity files: no id to match answers with
	}
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var mu sync.Mutex
	var ready []string
	var wg sync.WaitGroup
	for _, srv := range cf.Configuration().Servers {
		id := string(srv.ID)
		var done bool
		n.sm.read(func(st *fsm.State) { done = st.HasServed(id) })
		if done {
			continue
		}
		if srv.ID == raft.ServerID(n.cfg.ID) {
			if n.tr.VotesHeld() {
				continue // it has not learned yet whether it served before
			}
			mu.Lock() // members asked before this one may be answering
			ready = append(ready, id)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			st, got, err := n.askStatus(ls.ctx, addr)
			if err == nil && st.Id == id && got == cluster && !st.VotesHeld {
				mu.Lock()
				ready = append(ready, id)
				mu.Unlock()
			}
		}(string(srv.Address))
	}
	wg.Wait()
	slices.Sort(ready)
	for _, id := range ready {
		data, err := fsm.EncodeNodeServed(id)
		if err != nil {
			continue // an id that is not a name: nothing to record
		}
		f := n.raft.Apply(data, n.cfg.ApplyTimeout)
		if err := n.await(ls.ctx, f); err != nil {
			return // not leading any more, or stopping: the next term's loop goes on
		}
		if err, ok := f.Response().(error); ok {
			n.log.Warn("recording a member as having served failed", "node", id, "error", err)
			return
		}
		n.log.Info("recorded member as having served", "node", id)
	}
}
