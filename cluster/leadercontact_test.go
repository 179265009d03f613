package cluster

import (
	"testing"
	"time"
)

// silenceWatch acts once per silence, after the heartbeat timeout plus
// the drawn extra, only while following a known leader; a new contact
// starts a new silence with a new draw.
func TestSilenceWatchActsOncePerSilenceAfterTheTimeout(t *testing.T) {
	const ht = 500 * time.Millisecond
	draws := []time.Duration{40 * time.Millisecond, 90 * time.Millisecond}
	var maxes []time.Duration
	s := silenceWatch{jitter: func(max time.Duration) time.Duration {
		maxes = append(maxes, max)
		d := draws[0]
		draws = draws[1:]
		return d
	}}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		following bool
		contact   time.Time
		at        time.Duration // after t0
		want      bool
	}{
		{false, t0, time.Second, false},                             // not following: never
		{true, time.Time{}, time.Second, false},                     // no contact yet
		{true, t0, 100 * time.Millisecond, false},                   // first draw: 40 ms
		{true, t0, 539 * time.Millisecond, false},                   // just short of 540 ms
		{true, t0, 540 * time.Millisecond, true},                    // acts
		{true, t0, 900 * time.Millisecond, false},                   // once per silence
		{true, t0.Add(time.Second), 1200 * time.Millisecond, false}, // a new contact: second draw, 90 ms
		{true, t0.Add(time.Second), 1589 * time.Millisecond, false},
		{true, t0.Add(time.Second), 1590 * time.Millisecond, true},
	}
	for i, st := range steps {
		if got := s.due(st.following, st.contact, t0.Add(st.at), ht); got != st.want {
			t.Fatalf("step %d (%+v): due %v, want %v", i, st, got, st.want)
		}
	}
	for _, m := range maxes {
		if m != ht/5 {
			t.Fatalf("extra drawn below %v, want a fifth of the heartbeat timeout", m)
		}
	}
	if len(draws) != 0 {
		t.Fatalf("%d draws left: one per silence expected", len(draws))
	}
}
