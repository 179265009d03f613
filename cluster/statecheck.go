package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// Replicas compare state (cluster/DESIGN.md, "Replicas compare state").
//
// A checksum catches bytes that change on disk; it cannot catch a state
// that went wrong another way (memory, a nondeterministic bug, a corrupt
// entry applied before checksums existed). So every node hashes its state
// at the same log indexes, and nodes compare: a node whose hash differs
// from the hash a majority of voters agree on at the same index knows its
// state is corrupt. It then serves no lease call, refuses leadership, and
// stays so (a marker file in its data dir) until it is replaced.

// corruptMarker is the file in the data dir that records that the node's
// state was found corrupt. A node refuses to start while it exists; wiping
// the data dir (replacing the node) removes it.
const corruptMarker = "STATE_CORRUPT"

// checkpointsKept is how many recent checkpoints a node keeps and reports.
const checkpointsKept = 16

type checkpoint struct {
	index uint64
	hash  []byte
}

type pendingCheck struct {
	index uint64
	sn    *fsm.Snapshot
}

// stateCheckpoints takes the state machine's checkpoints: right after
// applying the first command entry at or past each multiple of every, the
// state is copied (fsm.Snapshot, under the apply lock: the expiry heap's
// pointers and the scope counters) and hashed off the apply path. Which
// entries are commands is the same on every replica, and a replica
// restored from a snapshot counts from the snapshot's index, so the
// checkpoints of every replica fall on the same indexes.
type stateCheckpoints struct {
	every   uint64
	pending chan pendingCheck // one waiting: a busy hasher skips a checkpoint

	mu   sync.Mutex
	ring []checkpoint // oldest first
}

func newStateCheckpoints(every uint64) *stateCheckpoints {
	return &stateCheckpoints{every: every, pending: make(chan pendingCheck, 1)}
}

// checkLeasesPerStep is the state size up to which a checkpoint comes every
// c.every indexes; each doubling of the leases beyond it doubles the
// interval, so that hashing costs about the same per entry at any size
// (a hash encodes the whole state, ~1 s of CPU at a million leases).
const checkLeasesPerStep = 1 << 16

// interval is the checkpoint interval for a state of leases leases: every,
// doubled for each doubling of leases beyond checkLeasesPerStep. The
// lease count is replicated state, so replicas with the same state use the
// same interval; and the boundaries of a longer interval are a subset of
// those of a shorter one, so replicas whose counts differ still share
// checkpoints.
func (c *stateCheckpoints) interval(leases int) uint64 {
	n := c.every
	for l := leases; l > checkLeasesPerStep && n < 1<<62; l >>= 1 {
		n <<= 1
	}
	return n
}

// due reports whether applying a command at index, after one at prev (or a
// snapshot restored at prev), to a state now holding leases leases,
// crosses a checkpoint boundary.
func (c *stateCheckpoints) due(prev, index uint64, leases int) bool {
	if c == nil || c.every == 0 {
		return false
	}
	n := c.interval(leases)
	return index/n != prev/n
}

// idle reports whether the hasher would take a copy now: a due checkpoint
// is skipped otherwise, before apply pays for the copy.
func (c *stateCheckpoints) idle() bool { return len(c.pending) < cap(c.pending) }

// hashSnapshot is the state hash replicas compare (Status state_hash and
// the checkpoints): SHA-256 of the snapshot's deterministic encoding,
// without the served nodes. Those are no lease state, and a replica of the
// version before them skips their entries: in a rolling upgrade, replicas
// with the same leases must hash alike, or the majority rule would take
// the minority's version for corruption.
func hashSnapshot(sn *fsm.Snapshot) ([]byte, error) {
	h := sha256.New()
	if _, err := sn.WithoutServed().WriteTo(h); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// offer hands a copy of the state at index to the hasher, without waiting.
func (c *stateCheckpoints) offer(index uint64, sn *fsm.Snapshot) {
	select {
	case c.pending <- pendingCheck{index: index, sn: sn}:
	default:
	}
}

// run hashes offered copies until stop is closed.
func (c *stateCheckpoints) run(stop <-chan struct{}, log hclog.Logger) {
	for {
		select {
		case <-stop:
			return
		case p := <-c.pending:
			if p.sn.Legacy() {
				// Entries from a pre-upgrade snapshot encode unlike the same
				// entries applied by this version: a replica that replayed
				// them would hash differently with the same state. No vote
				// until they are pruned (a missing vote fences no one).
				log.Debug("state checkpoint skipped: request ids restored from a snapshot of an older version", "index", p.index)
				continue
			}
			sum, err := hashSnapshot(p.sn)
			if err != nil {
				log.Warn("state checkpoint hash failed", "index", p.index, "error", err)
				continue
			}
			c.mu.Lock()
			c.ring = append(c.ring, checkpoint{index: p.index, hash: sum})
			if len(c.ring) > checkpointsKept {
				c.ring = append(c.ring[:0:0], c.ring[len(c.ring)-checkpointsKept:]...)
			}
			c.mu.Unlock()
		}
	}
}

// list returns the checkpoints, oldest first.
func (c *stateCheckpoints) list() []checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]checkpoint(nil), c.ring...)
}

func (c *stateCheckpoints) proto() []*api.StateCheckpoint {
	var out []*api.StateCheckpoint
	for _, cp := range c.list() {
		out = append(out, &api.StateCheckpoint{Index: cp.index, Hash: cp.hash})
	}
	return out
}

// ErrStateCorrupt is returned (codes.Unavailable) by every lease call on a
// node whose state was found to differ from the majority's.
var ErrStateCorrupt = errors.New("cluster: this node's state is corrupt")

// StateCorrupt returns why this node's state is known to be corrupt, or
// "" while it is not.
func (n *Node) StateCorrupt() string {
	if p := n.corrupt.Load(); p != nil {
		return *p
	}
	return ""
}

// markCorrupt records that the node's state differs from the majority's:
// from now on it serves no lease call, cuts its watchers, hands leadership
// away and refuses it, and leaves a marker so that it refuses to start
// until it is replaced.
func (n *Node) markCorrupt(reason string) {
	if !n.corrupt.CompareAndSwap(nil, &reason) {
		return
	}
	n.log.Error("this node's state is corrupt: it serves nothing and refuses leadership until it is replaced", "reason", reason,
		"what-to-do", replaceAdvice(n.cfg.ID))
	marker := filepath.Join(n.cfg.DataDir, corruptMarker)
	if err := os.WriteFile(marker, []byte(reason+"\n"), 0o600); err != nil {
		n.log.Error("cannot write the corrupt-state marker", "path", marker, "error", err)
	}
	n.hub.reset(n.sm.applied.Load())
	n.refuseLeadership()
}

// refuseLeadership hands leadership away when the node's state is corrupt
// and it leads; it reports whether it did. leaderLoop calls it on every
// election won, before the node serves.
func (n *Node) refuseLeadership() bool {
	if n.corrupt.Load() == nil || n.raft.State() != raft.Leader {
		return false
	}
	if ls := n.lead.Swap(nil); ls != nil {
		ls.cancel()
	}
	n.log.Error("refusing leadership: this node's state is corrupt; transferring it")
	f := n.raft.LeadershipTransfer()
	go func() {
		if err := f.Error(); err != nil {
			n.log.Warn("leadership transfer away from a corrupt node failed; retrying at the next check", "error", err)
		}
	}()
	return true
}

// checkCorruptMarker refuses to start a node whose state was found
// corrupt.
func checkCorruptMarker(dataDir, node string) error {
	path := filepath.Join(dataDir, corruptMarker)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: %s: %w", path, err)
	}
	return fmt.Errorf("%w: %s records that this node's state differed from the majority's (%s); %s",
		ErrCorruptStore, path, strings.TrimSpace(string(b)), replaceAdvice(node))
}

// corruptGuard refuses every lease call while the node's state is corrupt.
// Cluster calls (status, membership) and the Raft transport still work:
// the node's log is sound, only its applied state is not.
func (n *Node) corruptGuard(method string) error {
	if p := n.corrupt.Load(); p != nil && strings.HasPrefix(method, "/"+api.LeaseService_ServiceDesc.ServiceName+"/") {
		return status.Errorf(codes.Unavailable, "%v (%s): it serves nothing until it is replaced; use another node", ErrStateCorrupt, *p)
	}
	return nil
}

func (n *Node) corruptGuardUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.corruptGuard(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (n *Node) corruptGuardStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.corruptGuard(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// stateCheckLoop compares this node's checkpoints with its peers' every
// cfg.StateCheckPoll until the node stops.
func (n *Node) stateCheckLoop() {
	t := time.NewTicker(n.cfg.StateCheckPoll)
	defer t.Stop()
	for {
		select {
		case <-n.stopCh:
			return
		case <-t.C:
		}
		if n.corrupt.Load() != nil {
			n.refuseLeadership()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.StateCheckPoll)
		n.checkReplicas(ctx)
		cancel()
	}
}

// checkReplicas asks every other voter for its checkpoints and applies the
// majority rule at the newest index where a quorum of voters agrees on one
// hash: this node is corrupt when that hash is not its own. (At newer
// indexes some voters may not have hashed yet: a 1–1 split there decides
// nothing.) A peer that differs from a quorum this node belongs to is
// reported (it finds out by itself). Without a majority at any shared
// index nothing is decided.
func (n *Node) checkReplicas(ctx context.Context) {
	own := n.sm.checks.list()
	if len(own) == 0 {
		return
	}
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var voters []raft.Server
	selfVoter := false
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s)
			selfVoter = selfVoter || string(s.ID) == n.cfg.ID
		}
	}
	quorum := len(voters)/2 + 1
	peers := map[string]map[uint64][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range voters {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			conn, err := n.fwd.conn(addr)
			if err != nil {
				return
			}
			st, err := api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
			if err != nil {
				n.log.Debug("state check: peer status failed", "peer", id, "error", err)
				return
			}
			m := map[uint64][]byte{}
			for _, cp := range st.StateCheckpoints {
				m[cp.Index] = cp.Hash
			}
			mu.Lock()
			peers[id] = m
			mu.Unlock()
		}(string(s.ID), string(s.Address))
	}
	wg.Wait()

	v := judge(own, n.cfg.ID, selfVoter, peers, quorum)
	switch v.result {
	case "match":
		n.metrics.stateChecks.WithLabelValues("match").Inc()
		for _, d := range v.others {
			n.metrics.stateChecks.WithLabelValues("peer_differs").Inc()
			n.log.Error("replicas' state differs from the majority's", "index", v.index, "replicas", strings.Join(d.ids, ","),
				"their-hash", shortHash(d.hash), "majority-hash", shortHash(v.hash))
		}
	case "corrupt":
		n.metrics.stateChecks.WithLabelValues("corrupt").Inc()
		n.markCorrupt(fmt.Sprintf("at index %d this node's state hash is %s, voters %s agree on %s",
			v.index, shortHash(v.own), strings.Join(v.agree, ","), shortHash(v.hash)))
	case "undecided":
		n.metrics.stateChecks.WithLabelValues("undecided").Inc()
		n.log.Warn("replicas' states differ and no majority agrees", "index", v.index)
	}
}

// verdict is judge's answer.
type verdict struct {
	// result: "match" (a quorum agrees with this node), "corrupt" (a
	// quorum agrees on another hash), "undecided" (voters differ and no
	// quorum agrees at any shared index), "" (not enough voters hashed any
	// of this node's checkpoints yet).
	result string
	index  uint64
	own    []byte   // this node's hash at index
	hash   []byte   // the hash a quorum agrees on (match, corrupt)
	agree  []string // the voters that agree on hash, sorted
	others []hashVoters
}

type hashVoters struct {
	hash []byte
	ids  []string
}

// judge applies the majority rule to this node's checkpoints (own, oldest
// first) and the other voters' (peers: id -> index -> hash), newest index
// first: the first index where a quorum of voters agrees on one hash
// decides. At newer indexes some voters may not have hashed yet, so a
// split there decides nothing. It is pure: the caller acts on the verdict.
func judge(own []checkpoint, self string, selfVoter bool, peers map[string]map[uint64][]byte, quorum int) verdict {
	var undecided uint64
	for i := len(own) - 1; i >= 0; i-- {
		cp := own[i]
		votes := map[string][]string{} // hash -> voter ids
		if selfVoter {
			votes[string(cp.hash)] = []string{self}
		}
		for id, m := range peers {
			if h, ok := m[cp.index]; ok {
				votes[string(h)] = append(votes[string(h)], id)
			}
		}
		for h, ids := range votes {
			if len(ids) < quorum {
				continue
			}
			sort.Strings(ids)
			v := verdict{result: "corrupt", index: cp.index, own: cp.hash, hash: []byte(h), agree: ids}
			if h == string(cp.hash) {
				v.result = "match"
				for oh, oids := range votes {
					if oh != h {
						sort.Strings(oids)
						v.others = append(v.others, hashVoters{hash: []byte(oh), ids: oids})
					}
				}
				sort.Slice(v.others, func(a, b int) bool { return v.others[a].ids[0] < v.others[b].ids[0] })
			}
			return v
		}
		if len(votes) > 1 && undecided == 0 {
			undecided = cp.index
		}
	}
	if undecided != 0 {
		return verdict{result: "undecided", index: undecided}
	}
	return verdict{}
}

func shortHash(h []byte) string {
	if len(h) > 8 {
		h = h[:8]
	}
	return hex.EncodeToString(h)
}
