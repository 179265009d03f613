//go:build plantedbugs

package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
)

// Each planted client defect is caught by the safe-window check, on a
// client of its own (the knob is per client).
//
//	go test -tags plantedbugs -run TestSafeWindowCheckCatchesEachPlantedClientBug ./client/
func TestSafeWindowCheckCatchesEachPlantedClientBug(t *testing.T) {
	for _, bug := range []string{client.BugSentAtOnAnswer, client.BugFullTTL, client.BugNoDrift, client.BugZeroMargin} {
		t.Run(bug, func(t *testing.T) {
			safe, a, drift, margin := safeWindowRun(t, bug, func(c *client.Config) {
				c.Testing.PlantedBugs = []string{bug}
			})
			err := checkSafeWindow(safe, a, drift, margin)
			if err == nil {
				t.Fatalf("%s (%s) not caught", bug, client.PlantedBugs[bug])
			}
			t.Logf("caught: %v", err)
		})
	}
	if _, err := client.New(client.Config{Endpoints: []string{endpoint}, Testing: client.TestingKnobs{PlantedBugs: []string{"no-such-bug"}}}); err == nil {
		t.Fatal("an unknown planted bug was accepted")
	}
}

// A simulated host suspend: the boot clock (Config.Clock, as
// CLOCK_BOOTTIME) counts it, the host's monotonic clock does not. The
// correct client's lease has ended when the host wakes after more than its
// ttl; with BugMonotonicClock the client still calls it live.
//
//	go test -tags plantedbugs -run TestSuspendEndsTheLeaseUnlessPlantedMonotonicClock ./client/
func TestSuspendEndsTheLeaseUnlessPlantedMonotonicClock(t *testing.T) {
	for _, bug := range []string{"", client.BugMonotonicClock} {
		t.Run("bug="+bug, func(t *testing.T) {
			boot := &manualClock{now: 1000 * time.Hour}
			mono := &manualClock{now: 5 * time.Hour}
			cfg := client.Config{Endpoints: []string{endpoint}, Clock: boot, KeepAliveInterval: time.Hour,
				Testing: client.TestingKnobs{MonotonicClock: mono}}
			if bug != "" {
				cfg.Testing.PlantedBugs = []string{bug}
			}
			c, ctx := mustNew(t, cfg), ctxFor(t, 20*time.Second)
			l, err := c.Acquire(ctx, fmt.Sprintf("suspend/%s-%d", bug, time.Now().UnixNano()), client.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			boot.advance(30 * time.Second) // the host sleeps 30 s; mono stands still
			err = l.Err()
			switch {
			case bug == "" && !errors.Is(err, client.ErrSafeDeadline):
				t.Fatalf("correct client after a 30 s suspend of a 10 s lease: Err() = %v, want ErrSafeDeadline", err)
			case bug != "" && err != nil:
				t.Fatalf("planted %s: Err() = %v, want nil (the bug stretches the window)", bug, err)
			case bug != "":
				t.Logf("planted %s: lease still live after the suspend, safe for %v more", bug, time.Until(l.SafeUntil()).Round(time.Second))
			}
		})
	}
}

// An idle keep-alive stream (one lease, renewed every ttl/3) is kept by
// the correct client; with BugSilenceFromLastAnswer every renewal after an
// idle spell makes it look silent, so it is torn down and reopened.
//
//	go test -tags plantedbugs -run TestIdleStreamTornDownOnlyWithPlantedSilenceBug ./client/
func TestIdleStreamTornDownOnlyWithPlantedSilenceBug(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 7 s")
	}
	for _, bug := range []string{"", client.BugSilenceFromLastAnswer} {
		t.Run("bug="+bug, func(t *testing.T) {
			t.Parallel()
			cfg := client.Config{Endpoints: []string{endpoint}}
			if bug != "" {
				cfg.Testing.PlantedBugs = []string{bug}
			}
			c, ctx := mustNew(t, cfg), ctxFor(t, 30*time.Second)
			l, err := c.Acquire(ctx, fmt.Sprintf("idle/planted-%s-%d", bug, time.Now().UnixNano()), client.WithTTL(6*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			time.Sleep(7 * time.Second) // three renewals, each after a 2 s idle spell
			st := c.Stats()
			t.Logf("%+v", st)
			switch {
			case bug == "" && st.Streams != 1:
				t.Fatalf("correct client opened %d streams for one idle lease, want 1", st.Streams)
			case bug != "" && st.Streams < 3:
				t.Fatalf("planted %s: %d streams opened, want one per renewal", bug, st.Streams)
			}
		})
	}
}
