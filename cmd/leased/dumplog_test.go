package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
	"github.com/leasefence/leasefence/internal/dumplog"
)

// TestDumpLogWritesTheSharedSchema runs `leased dump-log` over a data dir
// holding one acquire, its log in raft.db (boltdb) or in wal/ (wal), and
// reads its output as dumplog.Records, the schema the harness reads
// (jepsen's resolve_dump_test.go runs Resolve over such dumps).
func TestDumpLogWritesTheSharedSchema(t *testing.T) {
	for _, kind := range []string{"boltdb", "wal"} {
		t.Run(kind, func(t *testing.T) { testDumpLogWritesTheSharedSchema(t, kind) })
	}
}

func testDumpLogWritesTheSharedSchema(t *testing.T, kind string) {
	dir := t.TempDir()
	id := make([]byte, fsm.LeaseIDLen)
	id[15] = 1
	entry, err := fsm.EncodeBatch(&fsmpb.Batch{NowNs: int64(time.Second), SkewMarginNs: int64(300 * time.Millisecond), DedupKeepNs: int64(time.Hour),
		Commands: []*fsmpb.Command{{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
			Resource: "jr/0", Holder: "w", TtlNs: int64(10 * time.Second), RequestId: "jepsen/w1-1-a", LeaseId: id}}}}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: dir + "/raft.db"})
	if err != nil {
		t.Fatal(err)
	}
	one := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: entry, AppendedAt: time.Unix(1_000_000, 0)}
	if kind == "wal" {
		// raft.db holds the term and vote only; a wal/ with its metadata
		// says where the log is (as in a data dir with no recorded store).
		if err := os.Mkdir(filepath.Join(dir, "wal"), 0o750); err != nil {
			t.Fatal(err)
		}
		w, err := raftwal.Open(filepath.Join(dir, "wal"))
		if err != nil {
			t.Fatal(err)
		}
		err = w.StoreLog(one)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
	} else if err := store.StoreLog(one); err != nil {
		t.Fatal(err)
	}
	store.Close()

	var out, errb bytes.Buffer
	if rc := run([]string{"dump-log", "--data-dir", dir}, &out, &errb); rc != 0 {
		t.Fatalf("dump-log exit %d: %s", rc, errb.String())
	}
	var recs []dumplog.Record
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r dumplog.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want a range and a command: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Kind != dumplog.KindRange || r.LogFirst != 1 || r.LogLast != 1 || r.Replayed != 1 {
		t.Errorf("range %+v", r)
	}
	if r := recs[1]; r.Kind != dumplog.KindCommand || r.Index != 1 || r.RequestID != "jepsen/w1-1-a" || r.Resource != "jr/0" || r.Token != 1 || r.Result != "ok" {
		t.Errorf("command %+v", r)
	}
}
