package fsm

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// Benchmarks of the apply path with no Raft running, so that a regression
// in encoding, decoding or apply shows in `go test -bench`:
//
//	go test -run '^$' -bench . -benchmem ./fsm/
//
// Figures are per entry (ns/op) and per command (ns/cmd).

// benchID returns a lease id unique for n.
func benchID(n uint64) []byte {
	id := make([]byte, LeaseIDLen)
	binary.BigEndian.PutUint64(id, n)
	id[15] = 0xBE
	return id
}

func benchAcquire(n uint64, resource string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
		Resource: resource, Holder: "bench", TtlNs: 10 * sec,
		RequestId: fmt.Sprintf("req-%016x", n), LeaseId: benchID(n),
	}}}
}

func benchBatch(now int64, cmds []*fsmpb.Command) *fsmpb.Batch {
	return &fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: sec, Commands: cmds}
}

// BenchmarkEncodeBatch measures EncodeBatch (deterministic protobuf
// marshalling plus the type byte) of a group-commit entry of acquires.
func BenchmarkEncodeBatch(b *testing.B) {
	for _, size := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("cmds=%d", size), func(b *testing.B) {
			cmds := make([]*fsmpb.Command, size)
			for i := range cmds {
				cmds[i] = benchAcquire(uint64(i), fmt.Sprintf("jobs/%d", i))
			}
			batch := benchBatch(sec, cmds)
			enc, err := EncodeBatch(batch)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeBatch(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/cmd")
		})
	}
}

// BenchmarkDecodeEntry measures parsing an entry of 64 acquires, the first
// half of every Apply.
func BenchmarkDecodeEntry(b *testing.B) {
	cmds := make([]*fsmpb.Command, 64)
	for i := range cmds {
		cmds[i] = benchAcquire(uint64(i), fmt.Sprintf("jobs/%d", i))
	}
	enc, err := EncodeBatch(benchBatch(sec, cmds))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEntry(enc, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/cmd")
}

// BenchmarkApplyAcquireReleaseBatch applies, per iteration, one entry of
// `cmds` acquires (each with its request id) and one entry releasing them
// plus a tick, with `live` other leases held throughout: apply cost must not
// grow with the number of live leases. Entries are encoded ahead in chunks
// outside the timer; cluster time advances 1ms per entry, and request ids
// are kept 1s, so the dedup table stays at its steady-state size.
func BenchmarkApplyAcquireReleaseBatch(b *testing.B) {
	for _, live := range []int{0, 100_000} {
		for _, size := range []int{1, 64} {
			b.Run(fmt.Sprintf("live=%d/cmds=%d", live, size), func(b *testing.B) {
				benchApplyCycle(b, live, size)
			})
		}
	}
}

func benchApplyCycle(b *testing.B, live, size int) {
	s := New()
	now := sec
	next := uint64(1 << 40)
	holdLive(b, s, &now, live)
	resources := make([]string, size)
	for i := range resources {
		resources[i] = fmt.Sprintf("cycle/%d", i)
	}
	const chunk = 256
	var entries [][]byte
	encode := func() {
		entries = entries[:0]
		for range chunk {
			acq := make([]*fsmpb.Command, size)
			rel := make([]*fsmpb.Command, size+1)
			for i := range acq {
				next++
				acq[i] = benchAcquire(next, resources[i])
				rel[i] = &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{LeaseId: benchID(next)}}}
			}
			rel[size] = &fsmpb.Command{Op: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{MaxExpire: 1000}}}
			for _, cmds := range [][]*fsmpb.Command{acq, rel} {
				now += 1e6
				e, err := EncodeBatch(benchBatch(now, cmds))
				if err != nil {
					b.Fatal(err)
				}
				entries = append(entries, e)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%chunk == 0 {
			b.StopTimer()
			encode()
			b.StartTimer()
		}
		for _, e := range entries[2*(i%chunk) : 2*(i%chunk)+2] {
			a, err := s.Apply(e)
			if err != nil {
				b.Fatal(err)
			}
			if r := a.Results[0]; r.Err != nil || r.Replayed {
				b.Fatalf("result %+v", r)
			}
		}
	}
	b.StopTimer()
	if s.Len() != live {
		b.Fatalf("%d leases held, want %d", s.Len(), live)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*size), "ns/cmd")
}

// holdLive grants n leases with a ttl far beyond the benchmark.
func holdLive(b *testing.B, s *State, now *int64, n int) {
	const per = 1000
	for done := 0; done < n; done += per {
		cmds := make([]*fsmpb.Command, 0, per)
		for i := done; i < min(n, done+per); i++ {
			c := benchAcquire(uint64(i), fmt.Sprintf("live/%d", i))
			c.GetAcquire().TtlNs = 1 << 50
			c.GetAcquire().RequestId = ""
			cmds = append(cmds, c)
		}
		*now += 1e6
		e, err := EncodeBatch(benchBatch(*now, cmds))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Apply(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyRenewBatch applies entries of 512 renewals (the keep-alive
// path groups many leases' renewals in one entry) with `live` leases held.
func BenchmarkApplyRenewBatch(b *testing.B) {
	for _, live := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			const size = 512
			s := New()
			now := sec
			holdLive(b, s, &now, live)
			const chunk = 64
			var entries [][]byte
			n := 0
			encode := func() {
				entries = entries[:0]
				for range chunk {
					cmds := make([]*fsmpb.Command, size)
					for i := range cmds {
						cmds[i] = &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: benchID(uint64(n % live))}}}
						n++
					}
					now += 1e6
					e, err := EncodeBatch(benchBatch(now, cmds))
					if err != nil {
						b.Fatal(err)
					}
					entries = append(entries, e)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%chunk == 0 {
					b.StopTimer()
					encode()
					b.StartTimer()
				}
				a, err := s.Apply(entries[i%chunk])
				if err != nil {
					b.Fatal(err)
				}
				if r := a.Results[0]; r.Err != nil {
					b.Fatalf("renew: %v", r.Err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/cmd")
		})
	}
}

// BenchmarkVerifyEntry measures the checksum check alone (fsm.VerifyEntry)
// on an entry of 64 acquires: what the log store adds to every read and
// store of an entry, and Apply to every apply.
func BenchmarkVerifyEntry(b *testing.B) {
	var cmds []*fsmpb.Command
	for i := 0; i < 64; i++ {
		cmds = append(cmds, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
			Resource: fmt.Sprintf("bench/%d", i), Holder: "worker", TtlNs: int64(10 * time.Second),
			RequestId: fmt.Sprintf("req-%d", i), LeaseId: make([]byte, LeaseIDLen)}}})
	}
	enc, err := EncodeBatch(&fsmpb.Batch{NowNs: 1, Commands: cmds})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := VerifyEntry(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTickSettlesRenewedLeases measures the lazy expiry heap's worst
// Tick: `live` leases granted at one instant with one ttl, all renewed,
// then a Tick past their first expiry settles every one of them in one
// apply (and expires none). The eager heap spread that work over the
// renewals instead (one sift each).
func BenchmarkTickSettlesRenewedLeases(b *testing.B) {
	const live = 100_000
	b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
		var grants, renewals []*fsmpb.Command
		for j := range uint64(live) {
			c := benchAcquire(j, fmt.Sprintf("live/%d", j))
			c.GetAcquire().RequestId = ""
			grants = append(grants, c)
			renewals = append(renewals, &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: benchID(j)}}})
		}
		setup := [][]byte{entry(b, sec, grants...), entry(b, 5*sec, renewals...)}
		tick := entry(b, 11*sec+testMargin+1, tickCmd())
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s := New()
			for _, e := range setup {
				if _, err := s.Apply(e); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			a, err := s.Apply(tick)
			if err != nil {
				b.Fatal(err)
			}
			if a.Results[0].Expired != 0 {
				b.Fatalf("expired %d, want 0", a.Results[0].Expired)
			}
		}
	})
}
