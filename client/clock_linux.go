//go:build linux

package client

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootTime is the one CLOCK_BOOTTIME reader every BootClock shares.
var bootTime = newAnchoredClock(readBootTime)

func readBootTime() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// Now implements Clock: CLOCK_BOOTTIME.
func (BootClock) Now() time.Duration { return bootTime.now() }
