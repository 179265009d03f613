package client

import (
	"sync"
	"time"
)

// Clock returns elapsed time since an arbitrary fixed origin. The client
// computes safe deadlines on it, so it must keep counting while the host is
// suspended: Go's own monotonic clock stops during system suspend and would
// stretch a lease's safe window by the length of the suspend. Every reading
// of one Clock must come from the same clock, on the same origin.
type Clock interface {
	Now() time.Duration
}

// BootClock is the default Clock.
//
// On Linux it reads CLOCK_BOOTTIME, which counts time spent in suspend. Should
// a reading ever fail (it cannot on Linux >= 2.6.39), it continues from the
// last good reading on Go's monotonic clock, so readings stay on one origin
// and never run backwards; it never reads the wall clock.
//
// On other systems it is Go's monotonic clock, measured from the start of
// the process (time.Since). That clock may stop while the host is
// suspended (it does on macOS), so there a suspend of the client's host
// stretches its leases' safe windows by the suspend's length: the process
// may act after its safe deadline has passed. The fencing token still
// protects the resource; the safe window alone does not. Run clients that
// must not outlive their window across a host suspend on Linux, or pass a
// Clock that counts suspend in Config.Clock.
type BootClock struct{}

// anchoredClock reads a primary clock and, when a reading fails, continues
// from the last value it returned by the time Go's monotonic clock says
// has passed since. Its readings never run backwards and keep the primary
// clock's origin (the first readings' origin is 0 if the primary failed
// from the start).
type anchoredClock struct {
	read func() (time.Duration, error)

	mu     sync.Mutex
	last   time.Duration // the last value returned
	lastAt time.Time     // Go monotonic reading taken with last
}

func newAnchoredClock(read func() (time.Duration, error)) *anchoredClock {
	return &anchoredClock{read: read, lastAt: time.Now()}
}

func (a *anchoredClock) now() time.Duration {
	d, err := a.read()
	at := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		d = a.last + at.Sub(a.lastAt)
	}
	// The primary clock counts at least what Go's does (suspend included),
	// so the clamp only matters when the primary failed from the start and
	// came back: then it jumps forward, which ends safe windows early,
	// never late.
	d = max(d, a.last)
	a.last, a.lastAt = d, at
	return d
}
