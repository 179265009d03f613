package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// lockedBuffer collects a node's log lines for assertions.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// oneNode starts a single-node cluster in a fresh data dir with its log in
// buf, and acquires n leases on it (one Raft entry each).
func oneNode(t *testing.T, buf *lockedBuffer, tweak func(*Config)) (*Node, Config) {
	t.Helper()
	addr := freeAddrs(t, 1)[0]
	cfg := DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
	cfg.Insecure = true
	cfg.Bootstrap = map[string]string{"n1": addr}
	cfg.MinTTL, cfg.SkewMargin, cfg.Tick = 1500*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	cfg.Logger = newBufLogger(buf)
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "leader", n.IsLeader)
	return n, cfg
}

func newBufLogger(buf *lockedBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Info, Output: buf})
}

func acquireN(t *testing.T, n *Node, prefix string, count int) {
	t.Helper()
	for i := 0; i < count; i++ {
		_, err := n.LeaseServer().Acquire(ctxT(t), &api.AcquireRequest{
			Resource: fmt.Sprintf("%s/%d", prefix, i), Ttl: durationpb.New(5 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startRefused starts cfg, which must be refused with an error that
// mentions every one of want; a started node is closed and fails the test.
func startRefused(t *testing.T, cfg Config, want ...string) error {
	t.Helper()
	n, err := Start(cfg)
	if err == nil {
		n.Close()
		t.Fatalf("node started; want a refusal mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("refusal %q does not mention %q", err, w)
		}
	}
	return err
}

// A bootstrap writes the node identity file, and a restart with the
// bootstrap list still given says it ignores it.
func TestIdentityIsWrittenAtBootstrapAndBootstrapIgnoredAfter(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, nil)
	n.Close()
	raw, err := os.ReadFile(filepath.Join(cfg.DataDir, IdentityFile))
	if err != nil {
		t.Fatalf("no identity file after bootstrap: %v", err)
	}
	var id Identity
	if err := json.Unmarshal(raw, &id); err != nil || id.NodeID != "n1" || id.ClusterID == "" || id.Created.IsZero() {
		t.Fatalf("identity %s: %+v %v", raw, id, err)
	}
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !strings.Contains(buf.String(), "ignoring the bootstrap list") {
		t.Fatalf("restart with a bootstrap list did not say it ignores it:\n%s", buf.String())
	}
}

// truncate -s 0 raft.db with the bootstrap list still configured: the node
// must not start afresh (it forgot its term and vote), and the file stays
// as it was.
func TestEmptiedRaftDBIsRefusedNotBootstrappedAgain(t *testing.T) {
	for _, how := range []string{"truncated", "removed"} {
		t.Run(how, func(t *testing.T) {
			var buf lockedBuffer
			n, cfg := oneNode(t, &buf, nil)
			acquireN(t, n, "wiped", 3)
			n.Close()
			db := filepath.Join(cfg.DataDir, "raft.db")
			if how == "truncated" {
				os.Truncate(db, 0)
			} else {
				os.Remove(db)
			}
			startRefused(t, cfg, IdentityFile, "raft.db", "join")
			fi, err := os.Stat(db)
			switch {
			case how == "truncated" && (err != nil || fi.Size() != 0):
				t.Fatalf("refused start changed raft.db: %v %v", fi, err)
			case how == "removed" && err == nil:
				t.Fatal("refused start created raft.db")
			}
		})
	}
}

// A node id other than the identity's is refused.
func TestDataDirOfAnotherNodeIsRefused(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, nil)
	n.Close()
	cfg.ID = "n2"
	cfg.Bootstrap = map[string]string{"n2": cfg.Listen}
	startRefused(t, cfg, `"n1"`, `"n2"`, IdentityFile)
}

// A damaged identity file is refused with its name, not trusted or
// rewritten.
func TestGarbledIdentityFileIsRefused(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, nil)
	n.Close()
	path := filepath.Join(cfg.DataDir, IdentityFile)
	os.WriteFile(path, []byte("{not json"), 0o600)
	startRefused(t, cfg, IdentityFile)
	if b, _ := os.ReadFile(path); string(b) != "{not json" {
		t.Fatalf("identity file rewritten: %q", b)
	}
}

// A raft.db cut short (truncate -s 32768) is refused with an error, never a
// bbolt panic.
func TestTruncatedRaftDBIsRefusedWithoutPanic(t *testing.T) {
	var buf lockedBuffer
	cfg := truncatedRaftDB(t, &buf)
	startRefused(t, cfg, "raft.db")
}

// An existing data dir from before identity files (state, no identity)
// gets one written at start, so that a later wipe is caught.
func TestIdentityIsWrittenForAnExistingDataDir(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, nil)
	n.Close()
	os.Remove(filepath.Join(cfg.DataDir, IdentityFile))
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if _, err := readIdentity(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, IdentityFile)); err != nil {
		t.Fatalf("identity not written for an existing data dir: %v", err)
	}
}

// A data dir from before identity files (Raft state, no identity, no
// recorded founding id) gets an empty cluster id, which the transport does
// not check: not one derived from this start's --bootstrap, which the node
// ignores (members may have been replaced since the founding).
func TestDataDirFromBeforeIdentitiesGetsNoClusterID(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, nil)
	n.Close()
	os.Remove(filepath.Join(cfg.DataDir, IdentityFile))
	store, err := openLogStore(filepath.Join(cfg.DataDir, "raft.db"), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := setFoundingClusterID(store, ""); err != nil { // as a release without the record left it
		t.Fatal(err)
	}
	store.Close()
	cfg.Bootstrap = map[string]string{"n1": cfg.Listen, "n9": "127.0.0.1:1"}
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if id := n.ClusterID(); id != "" {
		t.Fatalf("cluster id %q derived for a data dir from before identity files", id)
	}
}

// A node that joins through a follower writes the leader's cluster id, not
// the id of the node that forwarded its Join.
func TestJoinThroughAFollowerTakesTheLeadersClusterID(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	_, leader := tc.leader()
	fi, f := tc.follower()
	want := leader.ClusterID()
	f.setClusterID("a-follower-of-another-mind")
	cfg := tc.joinerConfig(t, fi, "n4")
	// The other id also cuts f off from raft (the transport checks it):
	// within an election timeout f knows no leader, and the lost-voter
	// guard, which asks the leader through f, would wait for good. The
	// marker of a join begun before skips the guard, as before it existed:
	// this test is about the Join answer.
	if err := os.WriteFile(filepath.Join(cfg.DataDir, JoinMarkerFile), []byte("test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n4, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	eventually(t, 10*time.Second, "the joined node's identity", func() bool {
		got, err := readIdentity(cfg.DataDir)
		return err == nil && got != nil && got.NodeID == "n4" && got.ClusterID == want
	})
}

// A node that joins writes its identity once it holds Raft state, with the
// cluster id of the cluster it joined.
func TestJoinedNodeWritesTheClusterIdentity(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	cfg := tc.joinerConfig(t, 0, "n2")
	n2, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	want, err := readIdentity(tc.cfgs[0].DataDir)
	if err != nil || want == nil {
		t.Fatalf("leader identity: %v %v", want, err)
	}
	eventually(t, 10*time.Second, "the joined node's identity", func() bool {
		got, err := readIdentity(cfg.DataDir)
		return err == nil && got != nil && got.NodeID == "n2" && got.ClusterID == want.ClusterID
	})
}

// snapshotDirs lists the snapshot directories, newest first (by the term
// and index that raft puts in their names).
func snapshotDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	type snap struct {
		term, index uint64
		path        string
	}
	var snaps []snap
	for _, e := range ents {
		var s snap
		var ms int64
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &s.term, &s.index, &ms); err != nil {
			continue
		}
		s.path = filepath.Join(dataDir, "snapshots", e.Name())
		snaps = append(snaps, s)
	}
	sort.Slice(snaps, func(i, j int) bool {
		if snaps[i].term != snaps[j].term {
			return snaps[i].term > snaps[j].term
		}
		return snaps[i].index > snaps[j].index
	})
	var out []string
	for _, s := range snaps {
		out = append(out, s.path)
	}
	return out
}

func corruptFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 16 {
		t.Fatalf("%s: %d bytes, %v", path, len(b), err)
	}
	b[len(b)/2] ^= 0xff
	os.WriteFile(path, b, 0o600)
}

// The log kept after a snapshot must reach back to the previous snapshot,
// so that a corrupt newest snapshot can be replaced by the older one plus
// the log: the defaults and Validate keep TrailingLogs >= SnapshotThreshold.
func TestTrailingLogsMustCoverTheSnapshotThreshold(t *testing.T) {
	d := DefaultConfig()
	d.ID, d.DataDir, d.Bootstrap = "n1", "/tmp/x", map[string]string{"n1": "127.0.0.1:7001"}
	d.Insecure = true
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if d.TrailingLogs < d.SnapshotThreshold {
		t.Fatalf("default trailing logs %d below the snapshot threshold %d", d.TrailingLogs, d.SnapshotThreshold)
	}
	d.TrailingLogs = d.SnapshotThreshold - 1
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "trailing logs") {
		t.Fatalf("trailing logs below the threshold: %v", err)
	}
}

// A corrupt newest snapshot: with the log reaching back, the node falls back
// to the previous snapshot and loses nothing.
func TestCorruptNewestSnapshotFallsBackToThePreviousOne(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, func(c *Config) {
		// Trailing logs far above the threshold: how far apart two
		// snapshots land depends on when raft's snapshot check runs (a
		// loaded machine saw 84 entries at a threshold of 32), and this
		// test is about the fallback when the log does reach back.
		c.SnapshotThreshold, c.SnapshotThresholdMax, c.TrailingLogs = 32, 32, 4096
		c.SnapshotInterval = 20 * time.Millisecond
	})
	for i := 0; len(snapshotDirs(t, cfg.DataDir)) < 2 || i < 3; i++ {
		acquireN(t, n, fmt.Sprintf("fallback/%d", i), 20)
		if i > 100 {
			t.Fatal("no two snapshots")
		}
	}
	var want int
	n.sm.read(func(st *fsm.State) { want = st.Len() })
	n.Close()
	corruptFile(t, filepath.Join(snapshotDirs(t, cfg.DataDir)[0], "state.bin"))
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	eventually(t, 10*time.Second, "leader", n.IsLeader)
	var got int
	eventually(t, 10*time.Second, "every lease back", func() bool {
		got = 0
		n.sm.read(func(st *fsm.State) { got = st.Len() })
		return got == want
	})
}

// A corrupt newest snapshot whose predecessor the log no longer reaches
// (a user snapshot far past the trailing logs): refused with a message
// naming the snapshot and what to do, never raft's "log not found" panic.
func TestCorruptNewestSnapshotWithoutLogIsRefused(t *testing.T) {
	var buf lockedBuffer
	n, cfg := oneNode(t, &buf, func(c *Config) {
		c.SnapshotThreshold, c.SnapshotThresholdMax, c.TrailingLogs = 1<<20, 1<<20, 1<<20
	})
	acquireN(t, n, "first", 5)
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	acquireN(t, n, "second", 40)
	// Compact the log hard for the second snapshot, as a trailing-logs
	// setting below the gap between snapshots would.
	rc := n.raft.ReloadableConfig()
	rc.TrailingLogs = 2
	if err := n.raft.ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	n.Close()
	dirs := snapshotDirs(t, cfg.DataDir)
	if len(dirs) < 2 {
		t.Fatalf("snapshots: %v", dirs)
	}
	corruptFile(t, filepath.Join(dirs[0], "state.bin"))
	startRefused(t, cfg, filepath.Base(dirs[0]), "replace")
}

// Switches that weaken a node say so loudly at start: plaintext (anyone
// can call the Raft transport) and peer routes (fault injection only).
func TestUnsafeSettingsWarnAtStart(t *testing.T) {
	var buf lockedBuffer
	n, _ := oneNode(t, &buf, func(c *Config) {
		c.Unsafe.PeerRoutes = map[string]string{"127.0.0.1:1": "127.0.0.1:2"}
	})
	n.Close()
	out := buf.String()
	for _, want := range []string{"[WARN]", "UNSAFE: peer routes", "127.0.0.1:1", "without TLS", "TimeoutNow", "AppendEntries"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out)
		}
	}
}

// dump-log reads a stopped node's raft.db: a truncated one is an error,
// never a panic or a fault.
func TestDumpLogOfATruncatedRaftDBIsAnError(t *testing.T) {
	var buf lockedBuffer
	cfg := truncatedRaftDB(t, &buf)
	var out bytes.Buffer
	if err := DumpLog(cfg.DataDir, &out); err == nil || !strings.Contains(err.Error(), "raft.db") {
		t.Fatalf("dump-log of a truncated raft.db: %v", err)
	}
}

// truncatedRaftDB runs a one-node cluster until its raft.db holds more than
// three times 32 KiB, stops it and cuts the file to 32 KiB (truncate -s
// 32768): the node's config, for a start or a dump on the damaged file.
func truncatedRaftDB(t *testing.T, buf *lockedBuffer) Config {
	t.Helper()
	// raft.db grows only while it holds the log (with wal it holds the
	// term and vote alone).
	n, cfg := oneNode(t, buf, func(c *Config) { c.LogStore = LogStoreBoltDB })
	db := filepath.Join(cfg.DataDir, "raft.db")
	for i := 0; ; i++ {
		acquireN(t, n, fmt.Sprintf("grow/%d", i), 50)
		if fi, _ := os.Stat(db); fi.Size() > 3*32768 {
			break
		}
	}
	n.Close()
	if err := os.Truncate(db, 32768); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A second node on a data dir another node holds is refused, naming the
// lock and the process that holds it, instead of a bare bbolt timeout.
func TestLockedDataDirNamesTheHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for bbolt's 5 s lock timeout")
	}
	tc := newTestCluster(t, 1, nil)
	cfg := tc.cfgs[0]
	cfg.Listen = freeAddrs(t, 1)[0]
	cfg.Bootstrap = nil
	_, err := Start(cfg)
	if err == nil {
		t.Fatal("a second node started on a locked data dir")
	}
	if want := fmt.Sprintf("data dir %s is locked by another process, pid %d", cfg.DataDir, os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
}
