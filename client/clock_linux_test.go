//go:build linux

package client

import (
	"errors"
	"testing"
	"time"
)

// BootClock reads CLOCK_BOOTTIME itself: each reading lies between two
// direct readings taken around it (same origin, not process start or the
// wall clock), and readings never run backwards.
func TestBootClockReadsBoottimeMonotonically(t *testing.T) {
	var prev time.Duration
	for i := 0; i < 10000; i++ {
		before, err := readBootTime()
		if err != nil {
			t.Fatal(err)
		}
		got := BootClock{}.Now()
		after, err := readBootTime()
		if err != nil {
			t.Fatal(err)
		}
		if got < before || got > after {
			t.Fatalf("reading %v outside the CLOCK_BOOTTIME readings around it [%v, %v]", got, before, after)
		}
		if got < prev {
			t.Fatalf("reading %v after %v: ran backwards", got, prev)
		}
		prev = got
	}
}

// When the primary clock fails, the reading continues from the last good
// one on Go's monotonic clock: same origin, never backwards, never the wall
// clock; and it picks the primary up again when that answers.
func TestBootClockFallbackKeepsOriginAndNeverRunsBackwards(t *testing.T) {
	base := 1000 * time.Hour // far from both zero and the Unix epoch
	fail := false
	a := newAnchoredClock(func() (time.Duration, error) {
		if fail {
			return 0, errors.New("injected: clock_gettime failed")
		}
		return base, nil
	})
	if got := a.now(); got != base {
		t.Fatalf("primary reading %v, want %v", got, base)
	}
	fail = true
	start := time.Now()
	var prev time.Duration
	for i := 0; i < 1000; i++ {
		got := a.now()
		elapsed := time.Since(start)
		if got < base || got < prev {
			t.Fatalf("fallback reading %v ran backwards (base %v, previous %v)", got, base, prev)
		}
		if got > base+elapsed+time.Second {
			t.Fatalf("fallback reading %v is not base + Go elapsed (%v): another clock", got, elapsed)
		}
		prev = got
	}
	fail = false
	base = prev - time.Millisecond // the primary is behind: the clamp holds
	if got := a.now(); got != prev {
		t.Fatalf("primary behind the fallback: reading %v, want %v held", got, prev)
	}
	base = prev + time.Hour
	if got := a.now(); got != base {
		t.Fatalf("primary back: reading %v, want %v", got, base)
	}
}
