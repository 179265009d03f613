package jepsen

import (
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
)

// The simulated host's monotonic clock stands still from freeze to thaw
// (a host suspend) and then goes on from where it stopped, while
// CLOCK_BOOTTIME counted the whole time.
func TestHostClockStandsStillWhileSuspended(t *testing.T) {
	h := newHostClock()
	boot0, mono0 := client.BootClock{}.Now(), h.Now()
	h.freeze()
	frozen := h.Now()
	time.Sleep(50 * time.Millisecond)
	if got := h.Now(); got != frozen {
		t.Fatalf("the clock moved %v while suspended", got-frozen)
	}
	h.thaw()
	mono1, boot1 := h.Now(), client.BootClock{}.Now()
	if boot1-boot0 < 50*time.Millisecond {
		t.Fatalf("CLOCK_BOOTTIME counted %v", boot1-boot0)
	}
	if d := mono1 - mono0; d < 0 || d > boot1-boot0-50*time.Millisecond {
		t.Fatalf("the host clock counted %v of the %v that passed, want it to miss the 50ms suspend", d, boot1-boot0)
	}
}
