package fsm

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

var (
	dedupStorm            = flag.Duration("dedup-storm", 0, "run TestDedupMemoryUnderRefusalStorm for this much simulated cluster time (e.g. 10m)")
	dedupStormRefusalKeep = flag.Duration("dedup-storm-refusal-keep", 2*time.Minute, "refusal_keep the storm's entries carry (the leader's default; 0: as before, dedup_keep)")
	dedupStormMaxRefusals = flag.Uint64("dedup-storm-max-refusals", 1000000, "max_refusals the storm's entries carry (the leader's default; 0: no cap, as before)")
)

// TestDedupMemoryUnderRefusalStorm measures the request-id table under a
// storm of refused polls: 10 000 refused Acquires per second of cluster
// time, each with a fresh request id (as a client polling a held resource
// sends them), group-committed 100 to an entry every 10 ms, with a tick
// and a renewal of the holder every second. Entries carry the leader's
// default refusal_keep and max_refusals unless the flags say otherwise. It
// reports the heap the State holds and its snapshot's size at the end. Off
// by default (it takes a while and a lot of memory); run it with
//
//	go test -count=1 -v -run TestDedupMemoryUnderRefusalStorm -dedup-storm 10m ./fsm/
//
// and, for the behaviour before refusals had a window and a cap, add
// -dedup-storm-refusal-keep 0 -dedup-storm-max-refusals 0.
func TestDedupMemoryUnderRefusalStorm(t *testing.T) {
	if *dedupStorm <= 0 {
		t.Skip("set -dedup-storm (e.g. 10m) to run")
	}
	const (
		perSecond = 10000
		perBatch  = 100
		maxTTL    = 10 * time.Minute
	)
	batch := func(now int64, cmds []*fsmpb.Command) []byte {
		b := stormBatch(now, int64(maxTTL), cmds)
		raw, err := EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	s := New()
	mustApply := func(raw []byte) *Applied {
		a, err := s.Apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	holder := &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
		Resource: "jobs/hot", Holder: "holder", TtlNs: int64(maxTTL), RequestId: "holder-request", LeaseId: benchID(0),
	}}}
	if r := mustApply(batch(0, []*fsmpb.Command{holder})).Results[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	seconds := int64(*dedupStorm / time.Second)
	n := uint64(1)
	var held, evicted int
	for sec := int64(0); sec < seconds; sec++ {
		for b := int64(0); b < perSecond/perBatch; b++ {
			now := sec*int64(time.Second) + b*int64(10*time.Millisecond) + 1
			cmds := make([]*fsmpb.Command, perBatch)
			for i := range cmds {
				cmds[i] = &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
					Resource: "jobs/hot", Holder: "poller", TtlNs: int64(10 * time.Second),
					RequestId: fmt.Sprintf("%032x", n), LeaseId: benchID(n),
				}}}
				n++
			}
			a := mustApply(batch(now, cmds))
			evicted += a.RefusalsEvicted
			for _, r := range a.Results {
				if r.Err != nil {
					held++
				}
			}
		}
		mustApply(batch((sec+1)*int64(time.Second), []*fsmpb.Command{renewCmdID(benchID(0)), tickCmd()}))
	}
	used := heap() - base
	size, err := s.Snapshot().WriteTo(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	grants, refusals := dedupCounts(s)
	t.Logf("%d refused Acquires over %v of cluster time (%d/s), refusal_keep %v, max_refusals %d: request-id entries %d grants, %d refusals, %d evicted; State heap %.1f MiB; snapshot %.1f MiB",
		held, *dedupStorm, perSecond, *dedupStormRefusalKeep, *dedupStormMaxRefusals, grants, refusals, evicted, float64(used)/(1<<20), float64(size)/(1<<20))
	runtime.KeepAlive(s)
}

func renewCmdID(id []byte) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: id}}}
}

// stormBatch stamps a batch as a leader with max ttl maxTTL, the default
// margin and the flags' refusal parameters does.
func stormBatch(now, maxTTL int64, cmds []*fsmpb.Command) *fsmpb.Batch {
	return &fsmpb.Batch{NowNs: now, SkewMarginNs: testMargin, DedupKeepNs: maxTTL + testMargin,
		RefusalKeepNs: int64(*dedupStormRefusalKeep), MaxRefusals: *dedupStormMaxRefusals, Commands: cmds}
}

// dedupCounts returns how many grants and refusals the request-id table
// holds.
func dedupCounts(s *State) (grants, refusals int) {
	return s.DedupLen()
}
