package client

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock returns elapsed time since an arbitrary fixed origin. The client
// computes safe deadlines on it, so it must keep counting while the host is
// suspended: Go's own monotonic clock stops during system suspend and would
// stretch a lease's safe window by the length of the suspend.
type Clock interface {
	Now() time.Duration
}

// BootClock reads CLOCK_BOOTTIME, which counts time spent in suspend.
type BootClock struct{}

// Now implements Clock.
func (BootClock) Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Cannot happen on Linux >= 2.6.39; fall back to the monotonic clock.
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
