//go:build !linux

package client

import "time"

// processStart is the origin of BootClock off Linux.
var processStart = time.Now()

// Now implements Clock: Go's monotonic clock since the process started,
// which may stop while the host is suspended (see BootClock).
func (BootClock) Now() time.Duration { return time.Since(processStart) }
