package jepsen

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/jepsen/checker"
	"github.com/leasefence/leasefence/jepsen/history"
	nm "github.com/leasefence/leasefence/jepsen/nemesis"
)

// TestCheckStorageRefusedCatchesANodeThatServedOn: the checker fails a
// run in which a node came up on a changed log and applied past the
// entry, and passes refusals and self-fencing.
func TestCheckStorageRefusedCatchesANodeThatServedOn(t *testing.T) {
	heal := func(o history.StorageOutcome) history.Fault {
		return history.Fault{Phase: "heal", Kind: history.NemStorage, Target: "n2", TimeNs: int64(time.Second), Storage: &o}
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 12, Fenced: true}),
		heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", SetAside: true})}); r.Verdict != checker.Valid || r.Checked != 3 {
		t.Fatalf("refused and fenced: %v", r)
	}
	r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 9, Refused: true}), heal(history.StorageOutcome{Index: 14, Served: true})})
	if r.Verdict != checker.Invalid || r.Anomaly != checker.AnomalyServedFromCorruptStore {
		t.Fatalf("served on: %v", r)
	}
	r = checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 64, Snapshot: "2-64-1", Served: true})})
	if r.Verdict != checker.Invalid || !strings.Contains(r.Witness, "snapshot") {
		t.Fatalf("restored a changed snapshot: %v", r)
	}
	if r := checker.CheckStorageRefused(nil); r.Verdict != history.Unknown {
		t.Fatalf("no fault: %v", r)
	}
	if r := checker.CheckStorageRefused([]history.Fault{heal(history.StorageOutcome{Index: 3})}); r.Verdict != history.Unknown {
		t.Fatalf("undecided: %v", r)
	}
}

// TestStorageNemesisChangeIsRefused runs the storage nemesis's log change
// on a real leased cluster with each log store (--log-store): a follower
// is stopped, nm.CorruptCommandEntry changes a committed entry naming a
// workload resource in its data dir (raft.db, or a raft-wal segment), and
// the follower, restarted, must refuse: exit saying "corrupt log entry"
// (its CRC-32C check of every command entry, or, when raft-wal dropped
// the changed batch as a torn write, the index raft.db recorded) or fence
// itself. Had the change missed the entry, or the node not noticed a
// dropped batch, it would serve on and this would fail.
//
// Each change is made twice: in a resource name, and in the type byte's
// high bit (0x02 → 0x82, an "ignorable" type, skipped without a word
// before such entries had to carry a checksum).
//
// The planted cases prove the change reaches the node's entry check itself:
// a leased built with the planted skip-entry-checksum (or, for the type
// byte, ignorable-unchecked) must serve on past the changed entry, as the
// jepsen suite's planted run expects. Were the
// change in raft-wal's own checked batch (a torn write, refused through
// raft.db's record), that node would refuse too and the planted bug would
// go unseen.
func TestStorageNemesisChangeIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts leased")
	}
	bin, plantedBin := t.TempDir(), t.TempDir()
	if err := Build(context.Background(), bin, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := Build(context.Background(), plantedBin, false, false, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, store, bin string
		change           nm.EntryChange
		env              []string
		serves           bool
	}{
		{"boltdb", "boltdb", bin, nm.ChangeName, nil, false},
		{"wal", "wal", bin, nm.ChangeName, nil, false},
		{"wal/planted_skip-entry-checksum_serves_on", "wal", plantedBin, nm.ChangeName, plantedEnv([]string{"skip-entry-checksum"}, "leased"), true},
		{"boltdb/type_byte", "boltdb", bin, nm.ChangeType, nil, false},
		{"wal/type_byte", "wal", bin, nm.ChangeType, nil, false},
		{"wal/type_byte/planted_ignorable-unchecked_serves_on", "wal", plantedBin, nm.ChangeType, plantedEnv([]string{"ignorable-unchecked"}, "leased"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := StartCluster(ctx, filepath.Join(tc.bin, "leased"), t.TempDir(), 3, []string{"--tick", "250ms", "--log-store", tc.store}, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
			leader := c.Leader(ctx)
			var addr, follower string
			for i, id := range c.Nodes() {
				if id == leader {
					addr = c.Endpoints()[i]
				} else {
					follower = id
				}
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			lc := api.NewLeaseServiceClient(conn)
			// One entry at a time: several batches, so that an older named
			// entry is there when the newest is raft-wal's last batch.
			for i := range 5 {
				if _, err := lc.Acquire(ctx, &api.AcquireRequest{Resource: fmt.Sprintf("jr/%d", i), Holder: "w1",
					Ttl: durationpb.New(time.Minute), RequestId: fmt.Sprintf("w1-%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			ls, err := c.Status(ctx, leader)
			if err != nil {
				t.Fatal(err)
			}
			for {
				fs, err := c.Status(ctx, follower)
				if err == nil && fs.AppliedIndex >= ls.AppliedIndex {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s did not apply up to %d: %v", follower, ls.AppliedIndex, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			p := c.Proc(follower)
			p.Kill(syscall.SIGTERM, 15*time.Second)
			index, path, err := nm.CorruptCommandEntry(c.DataDir(follower), "jr/", tc.change)
			if err != nil {
				t.Fatal(err)
			}
			want := "raft.db"
			if tc.store == "wal" {
				want = ".wal"
			}
			if !strings.HasSuffix(path, want) {
				t.Fatalf("changed %s; want the %s file", path, want)
			}
			t.Logf("entry %d changed in %s (leader applied %d)", index, path, ls.AppliedIndex)
			before := len(p.Tail(1 << 30))
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			for {
				select {
				case <-p.Exited():
					log := p.Tail(1 << 30)[before:]
					if tc.serves {
						t.Fatalf("planted %s exited after entry %d was changed in %s: the change did not reach its entry check:\n%s", follower, index, path, log)
					}
					if !strings.Contains(log, "corrupt log entry") {
						t.Fatalf("%s exited after entry %d was changed in %s, but not for the corrupt entry:\n%s", follower, index, path, log)
					}
					return
				default:
				}
				if st, err := c.Status(ctx, follower); err == nil {
					switch {
					case st.StateCorrupt != "" && tc.serves:
						t.Fatalf("planted %s fenced itself (%s) before applying entry %d", follower, st.StateCorrupt, index)
					case st.StateCorrupt != "":
						return // fenced itself
					case st.AppliedIndex >= index && tc.serves:
						return // applied the changed entry, as a node without the check would
					case st.AppliedIndex >= index:
						t.Fatalf("%s served on past entry %d changed in %s (applied %d):\n%s", follower, index, path, st.AppliedIndex, p.Tail(1 << 30)[before:])
					}
				}
				if ctx.Err() != nil {
					t.Fatalf("%s neither refused nor served after entry %d was changed in %s:\n%s", follower, index, path, p.Tail(1 << 30)[before:])
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
