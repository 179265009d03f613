package cluster

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkLogStoreCommit measures one small raft entry stored and synced
// (what every acquire costs the leader and a follower), in a fresh log file
// and in one that has held a long log since compacted (what a node looks
// like after granting a million leases: raft.db at 64-80 MB, most of it
// free pages), with bbolt's freelist written on every commit and not.
//
//	go test -run '^$' -bench LogStoreCommit -benchtime 2000x ./cluster/
func BenchmarkLogStoreCommit(b *testing.B) {
	for _, file := range []string{"fresh", "compacted"} {
		for _, unsynced := range []bool{false, true} {
			name := fmt.Sprintf("file=%s/freelist=%s", file, map[bool]string{false: "synced", true: "unsynced"}[unsynced])
			b.Run(name, func(b *testing.B) {
				store, err := openLogStore(filepath.Join(b.TempDir(), "raft.db"), unsynced)
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				next := uint64(1)
				if file == "compacted" {
					// 80 MB of 16 KB entries, the first 4 000 deleted as
					// raft's compaction would.
					big := make([]byte, 16<<10)
					for i := 0; i < 5120; i += 64 {
						var logs []*raft.Log
						for j := 0; j < 64; j++ {
							logs = append(logs, &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: big})
							next++
						}
						if err := store.StoreLogs(logs); err != nil {
							b.Fatal(err)
						}
					}
					if err := store.DeleteRange(1, 4000); err != nil {
						b.Fatal(err)
					}
				}
				free := store.Stats().FreePageN + store.Stats().PendingPageN
				data := make([]byte, 200)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := store.StoreLog(&raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}); err != nil {
						b.Fatal(err)
					}
					next++
				}
				b.ReportMetric(float64(free), "free-pages")
			})
		}
	}
}

// BenchmarkLogStoreAppend compares the two log stores (Config.LogStore)
// on what the leader and every follower do per write: StoreLogs of a
// batch of command entries, synced before it returns. An entry is 1 KiB,
// about what one batched entry carries at 64 clients (9 commands);
// batch=1 is a lightly loaded leader, batch=16 a follower catching up
// or a leader whose disk lags. Per op: one StoreLogs call.
//
// The machine is noisy: run the stores alternately, several rounds, and
// compare medians (docs/PERFORMANCE.md, "Log store"):
//
//	go test -run '^$' -bench 'LogStoreAppend/store=boltdb' -benchtime 2000x ./cluster/
//	go test -run '^$' -bench 'LogStoreAppend/store=wal' -benchtime 2000x ./cluster/
func BenchmarkLogStoreAppend(b *testing.B) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("store=%s/batch=%d", kind, batch), func(b *testing.B) {
				dir := b.TempDir()
				stable, logs, closeLog, _, err := openStores(dir, kind, dataDirLockWait, hclog.NewNullLogger())
				if err != nil {
					b.Fatal(err)
				}
				defer stable.Close()
				if closeLog != nil {
					defer closeLog.Close()
				}
				data := make([]byte, 1024)
				next := uint64(1)
				batchLogs := make([]*raft.Log, batch)
				for i := range batchLogs {
					batchLogs[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: data}
				}
				b.SetBytes(int64(batch * len(data)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, l := range batchLogs {
						l.Index = next
						next++
					}
					if err := logs.StoreLogs(batchLogs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
