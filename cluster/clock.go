package cluster

import (
	"sync"
	"time"
)

// Clock is a monotonic clock: Now returns the time elapsed since an
// arbitrary fixed origin, and never runs backwards. Cluster time is built
// from it alone; the node never reads the wall clock for lease decisions.
type Clock interface {
	Now() time.Duration
}

type systemClock struct{ origin time.Time }

// SystemClock returns the process's monotonic clock (Go's monotonic
// reading of time.Now, which wall-clock steps do not move).
func SystemClock() Clock { return systemClock{origin: time.Now()} }

func (c systemClock) Now() time.Duration { return time.Since(c.origin) }

// ManualClock is a Clock for tests: it follows the system's monotonic
// clock plus an offset that Step moves, in either direction. A node's
// absolute clock reading is meaningless to the cluster (a new leader rebases
// on the last applied cluster time), so a Step models a wall-clock jump or
// a different clock origin; stepping a *leader* forward models a rate fault.
type ManualClock struct {
	mu     sync.Mutex
	base   Clock
	offset time.Duration
}

// NewManualClock returns a ManualClock following the system clock.
func NewManualClock() *ManualClock { return &ManualClock{base: SystemClock()} }

// Now implements Clock.
func (c *ManualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Now() + c.offset
}

// Step moves the clock by d, forwards or backwards.
func (c *ManualClock) Step(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}
