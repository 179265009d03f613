package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// rateLog is a fakeClocks that keeps every rate it was given.
type rateLog struct {
	*fakeClocks
	rates map[string][]float64
}

func (r *rateLog) SetClock(id string, rate float64, off time.Duration) error {
	r.mu.Lock()
	r.rates[id] = append(r.rates[id], rate)
	r.mu.Unlock()
	return r.fakeClocks.SetClock(id, rate, off)
}

// The fault runs every node's clock at 1 + drift and heals it to 1; with
// no worker to pause it is not effective.
func TestClockDriftEdgeRunsEveryNodeFastThenHeals(t *testing.T) {
	var buf bytes.Buffer
	log := history.NewWriter(&buf)
	clocks := &rateLog{fakeClocks: &fakeClocks{set: map[string]clockSetting{}, offs: map[string][]time.Duration{}}, rates: map[string][]float64{}}
	n := &Nemesis{kinds: []string{history.NemClockDriftEdge}, rng: rand.New(rand.NewPCG(5, 5)), nodes: fakeNodes{}, clocks: clocks, log: log,
		ttl: 50 * time.Millisecond, counts: map[string]int{}, effect: map[string]int{}, progress: func(string) {}}
	n.clockDriftEdge(context.Background(), history.NemClockDriftEdge)
	log.Flush()
	faults, err := history.ReadFaults(buf.Bytes())
	if err != nil || len(faults) != 2 || faults[0].Phase != "start" || faults[1].Phase != "heal" || faults[1].Kind != history.NemClockDriftEdge {
		t.Fatalf("faults %+v (%v)", faults, err)
	}
	if faults[1].Effective {
		t.Fatal("effective without a client pause")
	}
	for _, id := range (fakeNodes{}).Nodes() {
		if got := clocks.rates[id]; !slices.Equal(got, []float64{1 + EdgeDrift, 1}) {
			t.Fatalf("%s rates %v, want 1.05 then 1", id, got)
		}
	}
}
