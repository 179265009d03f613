package cluster

import (
	"fmt"
	"path/filepath"
	"testing"

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
