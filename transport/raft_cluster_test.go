package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// listFSM appends every command to a list. Snapshots carry the list;
// Restore replaces it and counts the call.
type listFSM struct {
	mu       sync.Mutex
	entries  []string
	restores int
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.entries)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	f.restores++
	return nil
}

func (f *listFSM) state() (entries []string, restores int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries), f.restores
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s listSnapshot) Release() {}

// raftNode is one member of a test cluster: raft over a Transport on its own
// gRPC server, with in-memory stores.
type raftNode struct {
	id   raft.ServerID
	net  *testNode
	raft *raft.Raft
	fsm  *listFSM
	once sync.Once
}

func (n *raftNode) addr() raft.ServerAddress { return n.net.addr }

// stop shuts raft down (which closes the transport) and stops the server.
func (n *raftNode) stop(t testing.TB) {
	n.once.Do(func() {
		if err := n.raft.Shutdown().Error(); err != nil {
			t.Errorf("shutdown %s: %v", n.id, err)
		}
		n.net.stop()
	})
}

// startRaftNode starts a node with empty stores on addr.
func startRaftNode(t testing.TB, id raft.ServerID, addr string) *raftNode {
	t.Helper()
	net := startNode(t, addr, func(c *Config) {
		c.Timeout = 2 * time.Second
		c.MaxReconnectDelay = 500 * time.Millisecond
	})
	conf := raft.DefaultConfig()
	conf.LocalID = id
	conf.Logger = newTestLogger(t, "raft-"+string(id))
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	conf.LeaderLeaseTimeout = 250 * time.Millisecond
	conf.CommitTimeout = 10 * time.Millisecond
	conf.TrailingLogs = 10
	conf.SnapshotThreshold = 1 << 30  // snapshots only when the test asks
	conf.SnapshotInterval = time.Hour // likewise
	fsm := &listFSM{}
	r, err := raft.NewRaft(conf, fsm, raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore(), net.tr)
	if err != nil {
		t.Fatalf("NewRaft %s: %v", id, err)
	}
	n := &raftNode{id: id, net: net, raft: r, fsm: fsm}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// waitLeader polls until one of nodes is leader and returns it.
func waitLeader(t *testing.T, nodes []*raftNode) *raftNode {
	t.Helper()
	var leader *raftNode
	waitFor(t, 20*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

// padding makes every command 2 KiB long, so that a snapshot of a few
// hundred commands spans several InstallSnapshot chunks.
var padding = strings.Repeat("x", 2048)

// applyAll applies the commands prefix-from .. prefix-(from+count-1)
// through the current leader of nodes, retrying through a new leader when
// leadership moves. A retried command may be applied twice; checks
// compare whole lists between nodes and look for every command.
func applyAll(t *testing.T, nodes []*raftNode, prefix string, from, count int) {
	t.Helper()
	pending := make([]string, 0, count)
	for i := from; i < from+count; i++ {
		pending = append(pending, fmt.Sprintf("%s-%d", prefix, i))
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("could not apply %d commands", len(pending))
		}
		leader := waitLeader(t, nodes)
		futures := make([]raft.ApplyFuture, len(pending))
		for i, cmd := range pending {
			futures[i] = leader.raft.Apply([]byte(cmd+"|"+padding), 5*time.Second)
		}
		var failed []string
		for i, f := range futures {
			if err := f.Error(); err != nil {
				t.Logf("apply %s via %s: %v; will retry", pending[i], leader.id, err)
				failed = append(failed, pending[i])
			}
		}
		pending = failed
	}
}

// waitConverged polls until every node's FSM holds the same list and that
// list contains every command prefix-0 .. prefix-(count-1) of each prefix.
func waitConverged(t *testing.T, nodes []*raftNode, want map[string]int) []string {
	t.Helper()
	var list []string
	waitFor(t, 30*time.Second, "all FSMs to converge", func() bool {
		first, _ := nodes[0].fsm.state()
		for _, n := range nodes[1:] {
			if entries, _ := n.fsm.state(); !slices.Equal(entries, first) {
				return false
			}
		}
		have := make(map[string]bool, len(first))
		for _, e := range first {
			name, pad, _ := strings.Cut(e, "|")
			have[name] = pad == padding
		}
		for prefix, count := range want {
			for i := range count {
				if !have[fmt.Sprintf("%s-%d", prefix, i)] {
					return false
				}
			}
		}
		list = first
		return true
	})
	return list
}

func TestRaftClusterReplicatesFailsOverAndCatchesUpBySnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node raft cluster")
	}
	nodes := []*raftNode{
		startRaftNode(t, "n1", "127.0.0.1:0"),
		startRaftNode(t, "n2", "127.0.0.1:0"),
		startRaftNode(t, "n3", "127.0.0.1:0"),
	}
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: n.addr()})
	}
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	// 1. A leader is elected and 200 commands reach every FSM.
	first := waitLeader(t, nodes)
	t.Logf("first leader: %s", first.id)
	applyAll(t, nodes, "a", 0, 200)
	waitConverged(t, nodes, map[string]int{"a": 200})

	// 2. The leader goes down; the other two elect a new leader and go on.
	first.stop(t)
	var rest []*raftNode
	for _, n := range nodes {
		if n != first {
			rest = append(rest, n)
		}
	}
	second := waitLeader(t, rest)
	t.Logf("second leader: %s", second.id)
	applyAll(t, rest, "b", 0, 100)
	waitConverged(t, rest, map[string]int{"a": 200, "b": 100})

	// 3. The log is compacted while the old leader is away, so its entries
	// are gone from every live log.
	for _, n := range rest {
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot on %s: %v", n.id, err)
		}
	}
	applyAll(t, rest, "c", 0, 5)

	// 4. The old leader comes back empty on its old address and catches up
	// through InstallSnapshot, then through the log.
	back := startRaftNode(t, first.id, string(first.addr()))
	live := append(rest, back)
	waitFor(t, 30*time.Second, "the returning node to restore a snapshot", func() bool {
		_, restores := back.fsm.state()
		return restores > 0
	})
	if restored, _ := back.fsm.state(); len(restored) < 300 {
		t.Fatalf("the restored snapshot holds %d commands, want at least 300", len(restored))
	}
	applyAll(t, live, "d", 0, 20)
	list := waitConverged(t, live, map[string]int{"a": 200, "b": 100, "c": 5, "d": 20})
	t.Logf("converged on %d entries; leader %s", len(list), waitLeader(t, live).id)
}
