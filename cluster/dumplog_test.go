package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"

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

func TestDumpLogReplaysAppliedCommandsOfAStoppedNode(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.SnapshotThreshold, c.SnapshotThresholdMax, c.TrailingLogs = 1, 1, 1
		c.LogStore = LogStoreBoltDB // dump-log reads boltdb logs only (TestDumpLogOfAWALDataDirIsRefused)
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

	rng, byID := dumpRecords(t, tc.cfgs[0].DataDir)
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
	rng, byID = dumpRecords(t, tc.cfgs[0].DataDir)
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
