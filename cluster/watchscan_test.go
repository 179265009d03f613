package cluster

import (
	"testing"
	"time"
)

// publishWithin publishes the events of entry index and fails the test if
// that takes longer than d: apply must never wait on a watcher.
func publishWithin(t *testing.T, h *hub, d time.Duration, index uint64, n int) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		h.publish(index, applied("r", n))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("publish of entry %d waited %v on a subscriber scanning the ring", index, d)
	}
}

// A subscriber scanning the ring for its backlog does not hold up publish
// (apply's path): the hook stops the scan midway while entries are
// published. The backlog it then returns has every retained event after
// its position exactly once, and the live channel has the rest.
func TestSubscribeScanDoesNotBlockPublish(t *testing.T) {
	h := newHub(8)
	h.publish(1, applied("r", 4)) // positions (1,0)..(1,3)
	h.publish(2, applied("r", 2)) // (2,0), (2,1): six retained
	h.testScanning = func() {
		h.testScanning = nil
		// Two more: the ring (8) is full, nothing is evicted yet.
		publishWithin(t, h, 2*time.Second, 3, 2)
	}
	w, backlog, ok := h.subscribe("r", false, &position{1, 3})
	if !ok {
		t.Fatal("resume at a retained position refused")
	}
	var got []position
	for _, ev := range backlog {
		got = append(got, position{ev.Position.Index, ev.Position.Seq})
	}
	for len(w.ch) > 0 {
		ev := <-w.ch
		got = append(got, position{ev.Position.Index, ev.Position.Seq})
	}
	want := []position{{2, 0}, {2, 1}, {3, 0}, {3, 1}}
	if len(got) != len(want) {
		t.Fatalf("events after (1,3): %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events after (1,3): %v, want %v", got, want)
		}
	}
}

// When publishes during the scan evict events the subscriber needed, the
// resume is refused (OutOfRange for the caller), never answered with a
// gap; evicting only events it did not need changes nothing.
func TestSubscribeScanRacingEvictionRefusesOrIsExact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after position
		ok    bool
		want  int // backlog + live events
	}{
		{"needed events evicted", position{1, 1}, false, 0},
		{"only older events evicted", position{1, 5}, true, 2 + 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(8)
			h.publish(1, applied("r", 8)) // (1,0)..(1,7): full
			h.testScanning = func() {
				h.testScanning = nil
				publishWithin(t, h, 2*time.Second, 2, 6) // evicts (1,0)..(1,5)
			}
			w, backlog, ok := h.subscribe("r", false, &tc.after)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			n := len(backlog) + len(w.ch)
			seen := map[position]bool{}
			for _, ev := range backlog {
				seen[position{ev.Position.Index, ev.Position.Seq}] = true
			}
			for len(w.ch) > 0 {
				ev := <-w.ch
				p := position{ev.Position.Index, ev.Position.Seq}
				if seen[p] {
					t.Fatalf("event %v delivered twice", p)
				}
				seen[p] = true
			}
			if n != tc.want || len(seen) != tc.want {
				t.Fatalf("%d events (%d distinct), want %d", n, len(seen), tc.want)
			}
		})
	}
}

// BenchmarkPublishWhileResuming times publish (apply's path) while other
// goroutines keep resuming watches from the oldest retained position of a
// full 256k-event ring, each scanning all of it.
func BenchmarkPublishWhileResuming(b *testing.B) {
	const size = 1 << 18
	h := newHub(size)
	for i := 0; i < size/64; i++ {
		h.publish(uint64(i+1), applied("r", 64))
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			h.mu.Lock()
			after := h.lost
			h.mu.Unlock()
			if w, _, ok := h.subscribe("other", false, &after); ok {
				h.unsubscribe(w)
			}
		}
	}()
	one := applied("r", 1)
	var worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		h.publish(uint64(size+i), one)
		worst = max(worst, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	<-done
	b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
}
