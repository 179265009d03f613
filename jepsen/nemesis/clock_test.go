package nemesis

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/jepsen/history"
)

// fakeNodes is a NodeControl of three nodes, n2 leading.
type fakeNodes struct{}

func (fakeNodes) Nodes() []string               { return []string{"n1", "n2", "n3"} }
func (fakeNodes) Leader(context.Context) string { return "n2" }
func (fakeNodes) Kill9(string) error            { return nil }
func (fakeNodes) Restart(string) error          { return nil }
func (fakeNodes) Pause(string) (bool, error)    { return true, nil }
func (fakeNodes) Resume(string) error           { return nil }

// fakeClocks is a ClockControl that applies settings at once and keeps
// every offset it was given.
type fakeClocks struct {
	mu   sync.Mutex
	set  map[string]clockSetting
	offs map[string][]time.Duration
}

type clockSetting struct {
	rate float64
	off  time.Duration
}

func (f *fakeClocks) SetClock(id string, rate float64, off time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set[id] = clockSetting{rate, off}
	f.offs[id] = append(f.offs[id], off)
	return nil
}

func (f *fakeClocks) ClockStatus(_ context.Context, id string) (float64, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.set[id]
	return s.rate, s.off, nil
}

// Each clock nemesis records a start and a heal, verified effective, and
// leaves every clock at rate 1 and offset 0.
func TestClockNemesesRecordVerifyAndHeal(t *testing.T) {
	for _, kind := range []string{history.NemClockBump, history.NemClockStrobe, history.NemClockRate} {
		t.Run(kind, func(t *testing.T) {
			var buf bytes.Buffer
			log := history.NewWriter(&buf)
			clocks := &fakeClocks{set: map[string]clockSetting{}, offs: map[string][]time.Duration{}}
			n := &Nemesis{kinds: []string{kind}, rng: rand.New(rand.NewPCG(5, 5)), nodes: fakeNodes{}, clocks: clocks, log: log,
				counts: map[string]int{}, effect: map[string]int{}, progress: func(string) {}}
			hold := 400 * time.Millisecond
			switch kind {
			case history.NemClockBump:
				n.clockBump(context.Background(), hold)
			case history.NemClockStrobe:
				n.clockStrobe(context.Background(), hold)
			case history.NemClockRate:
				n.clockRate(context.Background(), hold)
			}
			log.Flush()
			faults, err := history.ReadFaults(buf.Bytes())
			if err != nil || len(faults) != 2 || faults[0].Phase != "start" || faults[1].Phase != "heal" || faults[1].Kind != kind {
				t.Fatalf("faults %+v (%v)", faults, err)
			}
			if !faults[1].Effective {
				t.Fatalf("not effective: %+v", faults)
			}
			if len(clocks.set) == 0 {
				t.Fatal("no clock was set")
			}
			for id, s := range clocks.set {
				if s.rate != 1 || s.off != 0 {
					t.Fatalf("%s left at rate %g offset %v", id, s.rate, s.off)
				}
				offs := clocks.offs[id]
				switch kind {
				case history.NemClockBump:
					if len(offs) != 2 || offs[0].Abs() < time.Second || offs[0].Abs() > time.Hour {
						t.Fatalf("%s offsets %v", id, offs)
					}
				case history.NemClockStrobe:
					if len(offs) < 4 || offs[0] != -offs[1] {
						t.Fatalf("%s offsets %v: not flipping", id, offs)
					}
				case history.NemClockRate:
					if id != "n2" {
						t.Fatalf("rate fault on %s, not the leader", id)
					}
				}
			}
			if c, e := n.Counts(); c[kind] != 1 || e[kind] != 1 {
				t.Fatalf("counts %v effective %v", c, e)
			}
		})
	}
}
