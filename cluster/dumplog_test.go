package cluster

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"

	"github.com/leasefence/leasefence/api"
)

func dumpRecords(t *testing.T, dir string) (LogRecord, map[string][]LogRecord) {
	t.Helper()
	var buf bytes.Buffer
	if err := DumpLog(dir, &buf); err != nil {
		t.Fatal(err)
	}
	var rng LogRecord
	byID := map[string][]LogRecord{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var r LogRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		switch {
		case r.Kind == LogRange:
			rng = r
		case r.RequestID != "":
			byID[r.RequestID] = append(byID[r.RequestID], r)
		}
	}
	return rng, byID
}

// dataDirHashes is the sha256 of every file under dir, by path: a dump
// must leave them all as they were.
func dataDirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sums[path] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// dumpUnchanged dumps dir like dumpRecords and fails the test when a file
// under dir was added, removed or changed by the dump.
func dumpUnchanged(t *testing.T, dir string) (LogRecord, map[string][]LogRecord) {
	t.Helper()
	before := dataDirHashes(t, dir)
	rng, byID := dumpRecords(t, dir)
	if after := dataDirHashes(t, dir); !maps.Equal(before, after) {
		t.Fatalf("dump-log changed the data dir: %v", changedFiles(before, after))
	}
	return rng, byID
}

// changedFiles lists the paths whose hashes differ between before and
// after, or that only one of them has.
func changedFiles(before, after map[string]string) []string {
	var changed []string
	for p, h := range before {
		if a, ok := after[p]; !ok || a != h {
			changed = append(changed, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			changed = append(changed, p)
		}
	}
	return changed
}

// A wal data dir whose log is gone or damaged gives an error that names
// what is wrong, never a panic or an empty dump, and stays unchanged. The
// log is written with small segments so that damage hits sealed ones: a
// damaged tail segment is what a torn write leaves, which raft-wal
// recovers by reading up to the last whole entry (so does a node).
func TestDumpLogOfAMissingOrDamagedWALIsAnError(t *testing.T) {
	made := t.TempDir()
	stable, err := raftboltdb.NewBoltStore(filepath.Join(made, "raft.db"))
	must(t, err)
	must(t, stable.Set(logStoreKey, []byte(LogStoreWAL)))
	must(t, stable.SetUint64([]byte("CurrentTerm"), 1))
	must(t, stable.Close())
	must(t, os.Mkdir(filepath.Join(made, walDirName), 0o750))
	logs, err := raftwal.Open(filepath.Join(made, walDirName), raftwal.WithSegmentSize(4096), raftwal.WithLogger(hclog.NewNullLogger()))
	must(t, err)
	for i := uint64(1); i <= 100; i++ {
		must(t, logs.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogNoop, Data: bytes.Repeat([]byte{byte(i)}, 200)}))
	}
	must(t, logs.Close())
	if rng, _ := dumpUnchanged(t, made); rng.LogFirst != 1 || rng.LogLast != 100 {
		t.Fatalf("undamaged: range %+v", rng)
	}
	segs, err := filepath.Glob(filepath.Join(made, walDirName, "*.wal"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("want at least 3 segment files: %v, %v", segs, err)
	}
	sealed := filepath.Base(segs[0]) // names sort by base index; the last is the tail

	for _, tc := range []struct {
		name   string
		damage func(wal string) error
		want   string
	}{
		{"wal removed", func(wal string) error { return os.RemoveAll(wal) }, "missing"},
		{"metadata emptied", func(wal string) error { return os.Truncate(filepath.Join(wal, "wal-meta.db"), 0) }, "empty"},
		{"metadata truncated", func(wal string) error { return os.Truncate(filepath.Join(wal, "wal-meta.db"), 4096) }, "truncated"},
		{"sealed segment removed", func(wal string) error { return os.Remove(filepath.Join(wal, sealed)) }, sealed},
		{"sealed segment truncated", func(wal string) error { return os.Truncate(filepath.Join(wal, sealed), 1000) }, walDirName},
		{"sealed segment overwritten", func(wal string) error {
			fi, err := os.Stat(filepath.Join(wal, sealed))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(wal, sealed), bytes.Repeat([]byte{0xa5}, int(fi.Size())), 0o600)
		}, walDirName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.CopyFS(dir, os.DirFS(made)))
			must(t, tc.damage(filepath.Join(dir, walDirName)))
			before := dataDirHashes(t, dir)
			var out bytes.Buffer
			err := DumpLog(dir, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Join(dir, walDirName)) {
				t.Fatalf("dump-log of a wal data dir with its %s: %v (want an error naming %s and %q), output %q", tc.name, err, filepath.Join(dir, walDirName), tc.want, out.String())
			}
			if after := dataDirHashes(t, dir); !maps.Equal(before, after) {
				t.Fatalf("dump-log changed the data dir: %v", changedFiles(before, after))
			}
			t.Log(err)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDumpLogReplaysAppliedCommandsOfAStoppedNode(t *testing.T) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) { testDumpLogReplaysAppliedCommands(t, kind) })
	}
}

func testDumpLogReplaysAppliedCommands(t *testing.T, kind string) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.SnapshotThreshold, c.SnapshotThresholdMax, c.TrailingLogs = 1, 1, 1
		c.LogStore = kind
	})
	c := tc.client(0)
	ctx := ctxT(t)
	acq := func(res, rid string) (*api.AcquireResponse, error) {
		req := acquireReq(res, 10*time.Second)
		req.RequestId = rid
		return c.Acquire(ctx, req)
	}
	r1, err := acq("d/1", "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acq("d/1", "r-2"); err == nil {
		t.Fatal("second acquire of a held resource granted")
	}
	if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r1.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	r3, err := acq("d/1", "r-3")
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(0)

	rng, byID := dumpUnchanged(t, tc.cfgs[0].DataDir)
	if rng.Replayed != 1 || rng.LogFirst != 1 || rng.LogLast < 4 || rng.FirstAppendedAtNs == 0 {
		t.Fatalf("range %+v", rng)
	}
	if g := byID["r-1"]; len(g) != 1 || g[0].Result != "ok" || g[0].Token != 1 || g[0].LeaseID != api.FormatLeaseID(r1.Lease.Id) || g[0].Index == 0 || g[0].AppendedAtNs == 0 {
		t.Fatalf("r-1: %+v", g)
	}
	if g := byID["r-2"]; len(g) != 1 || g[0].Result != "refused" || g[0].Error == "" {
		t.Fatalf("r-2: %+v", g)
	}
	if g := byID["r-3"]; len(g) != 1 || g[0].Result != "ok" || g[0].Token != 2 || g[0].LeaseID != api.FormatLeaseID(r3.Lease.Id) {
		t.Fatalf("r-3: %+v", g)
	}

	// Compacted: a snapshot, one more grant, and the log keeps one entry
	// behind the snapshot. The dump starts from the snapshot, whose
	// remembered request ids still give r-1 and r-3.
	tc.start(0)
	tc.leader()
	if err := tc.nodes[0].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c = tc.client(0)
	if _, err := acq("d/2", "r-4"); err != nil {
		t.Fatal(err)
	}
	if err := tc.nodes[0].Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := acq("d/3", "r-5"); err != nil {
		t.Fatal(err)
	}
	tc.stop(0)
	rng, byID = dumpUnchanged(t, tc.cfgs[0].DataDir)
	if rng.LogFirst <= 1 || rng.SnapshotIndex == 0 || rng.Replayed != rng.SnapshotIndex+1 {
		t.Fatalf("compacted range %+v", rng)
	}
	for _, rid := range []string{"r-1", "r-3", "r-4"} {
		if g := byID[rid]; len(g) != 1 || g[0].Kind != LogDedup || g[0].Result != "ok" {
			t.Fatalf("%s after compaction: %+v", rid, g)
		}
	}
	if g := byID["r-5"]; len(g) != 1 || g[0].Kind != LogCommand || g[0].Token != 1 || g[0].Resource != "d/3" {
		t.Fatalf("r-5: %+v", g)
	}
	// A refusal is remembered like a grant (a request id's first outcome
	// is final), so it survives compaction as a refused entry.
	if g := byID["r-2"]; len(g) != 1 || g[0].Kind != LogDedup || g[0].Result != "refused" {
		t.Fatalf("r-2 after compaction: %+v", g)
	}
}
