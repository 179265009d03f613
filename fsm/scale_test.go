package fsm

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// BenchmarkScale reports, at 1 000, 100 000 and 1 000 000 live leases: heap
// bytes per lease (with a request id each), snapshot size, snapshot encode
// time, restore time, and the apply time of one acquire+release batch at
// that size.
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./fsm/
//
// With LEASEFENCE_HEAPPROFILE=PREFIX it also writes, per size, the heap
// profile taken while the state is live (PREFIX-N.pprof; read it with
// go tool pprof -sample_index=inuse_space).
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{1000, 100000, 1000000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			s := New()
			const perBatch = 1000
			for i := 0; i < n; i += perBatch {
				cmds := make([]*fsmpb.Command, 0, perBatch)
				for j := i; j < i+perBatch && j < n; j++ {
					id := make([]byte, LeaseIDLen)
					id[0], id[1], id[2], id[3] = byte(j), byte(j>>8), byte(j>>16), byte(j>>24)
					cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
						Resource: fmt.Sprintf("jobs/%08d", j), Holder: "worker-000", TtlNs: int64(time.Hour),
						RequestId: fmt.Sprintf("%032x", j), LeaseId: id,
					}}})
				}
				if _, err := s.Apply(entry(b, int64(time.Second), cmds...)); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			heapPerLease := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
			if prefix := os.Getenv("LEASEFENCE_HEAPPROFILE"); prefix != "" {
				f, err := os.Create(fmt.Sprintf("%s-%d.pprof", prefix, n))
				if err != nil {
					b.Fatal(err)
				}
				if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}

			start := time.Now()
			var buf bytes.Buffer
			if _, err := s.Snapshot().WriteTo(&buf); err != nil {
				b.Fatal(err)
			}
			snapMS := float64(time.Since(start).Milliseconds())
			start = time.Now()
			if _, err := Restore(bytes.NewReader(buf.Bytes())); err != nil {
				b.Fatal(err)
			}
			restoreMS := float64(time.Since(start).Milliseconds())

			cycle := entry(b, int64(2*time.Second), acquireCmd("scale/probe", 10*sec, 0xEE, ""), releaseCmd(0xEE))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Apply(cycle); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(heapPerLease, "heap-B/lease")
			b.ReportMetric(snapMS, "snapshot-ms")
			b.ReportMetric(float64(buf.Len())/1e6, "snapshot-MB")
			b.ReportMetric(restoreMS, "restore-ms")
		})
	}
}
