package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
)

// stepClock is a Clock that moves only when told.
type stepClock struct {
	mu sync.Mutex
	t  time.Duration
}

func (c *stepClock) Now() time.Duration  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) add(d time.Duration) { c.mu.Lock(); c.t += d; c.mu.Unlock() }

func TestFaultClockRateScalesElapsedTimeAndNeverRunsBackwards(t *testing.T) {
	real := &stepClock{}
	fc := NewFaultClock(filepath.Join(t.TempDir(), "none.json"), nil)
	fc.real = real
	real.add(time.Second)
	if got := fc.Now(); got != time.Second {
		t.Fatalf("rate 1: %v, want 1s", got)
	}
	if err := fc.Set(2, 0); err != nil {
		t.Fatal(err)
	}
	real.add(time.Second)
	if got := fc.Now(); got != 3*time.Second {
		t.Fatalf("rate 2 for 1s after 1s: %v, want 3s", got)
	}
	if err := fc.Set(0.5, 0); err != nil {
		t.Fatal(err)
	}
	if got := fc.Now(); got != 3*time.Second {
		t.Fatalf("a rate change moved the reading: %v, want 3s", got)
	}
	real.add(2 * time.Second)
	if got := fc.Now(); got != 4*time.Second {
		t.Fatalf("rate 0.5 for 2s: %v, want 4s", got)
	}
	if err := fc.Set(0, 0); err != nil {
		t.Fatal(err)
	}
	real.add(time.Hour)
	if got := fc.Now(); got != 4*time.Second {
		t.Fatalf("rate 0: %v, want the clock stopped at 4s", got)
	}
	prev := fc.Now()
	for i, r := range []float64{3, 0.1, 1, 7.3, 0.9999} {
		if err := fc.Set(r, 0); err != nil {
			t.Fatal(err)
		}
		real.add(time.Duration(i+1) * 333 * time.Microsecond)
		if got := fc.Now(); got < prev {
			t.Fatalf("ran backwards at rate %g: %v after %v", r, got, prev)
		} else {
			prev = got
		}
	}
	for _, bad := range []float64{-1, MaxFaultClockRate + 1} {
		if err := fc.Set(bad, time.Hour); err == nil {
			t.Fatalf("rate %g accepted", bad)
		}
	}
	if fc.Rate() != 0.9999 || fc.WallOffset() != 0 {
		t.Fatalf("a refused Set changed the clock: rate %g offset %v", fc.Rate(), fc.WallOffset())
	}
}

func TestFaultClockWallFollowsTheOffset(t *testing.T) {
	fc := NewFaultClock(filepath.Join(t.TempDir(), "none.json"), nil)
	if err := fc.Set(1, -time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(fc.Wall()); d > -59*time.Minute || d < -61*time.Minute {
		t.Fatalf("wall offset -1h reads %v from now", d)
	}
}

func TestFaultClockControlFileAppliesAndBadFilesAreIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock.json")
	fc := NewFaultClock(path, testLogger(t, "fault-clock"))
	fc.Poll() // missing: nothing changes
	if fc.Rate() != 1 || fc.WallOffset() != 0 {
		t.Fatalf("missing file changed the clock: %g %v", fc.Rate(), fc.WallOffset())
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		fc.Poll()
	}
	write(`{"rate":2.5,"wall_offset_ns":-5000000000}`)
	if fc.Rate() != 2.5 || fc.WallOffset() != -5*time.Second {
		t.Fatalf("file not applied: %g %v", fc.Rate(), fc.WallOffset())
	}
	for _, bad := range []string{
		``, `{`, `not json`, `{"rate":-1}`, `{"rate":1e999}`, `{"rate":1000}`, `{"rate":"fast"}`,
		`{"rate":1,"wall_offset_ns":1.5}`, `{"rate":1,"offset":3}`, `{"rate":1} {"rate":2}`, `[1,2]`,
	} {
		write(bad)
		if fc.Rate() != 2.5 || fc.WallOffset() != -5*time.Second {
			t.Fatalf("bad file %q changed the clock: %g %v", bad, fc.Rate(), fc.WallOffset())
		}
	}
	write(`{"wall_offset_ns":7}`)
	if fc.Rate() != 1 || fc.WallOffset() != 7 {
		t.Fatalf("a missing rate is 1: %g %v", fc.Rate(), fc.WallOffset())
	}
}

// A node started with a fault clock file says so in Status, reports the
// clock's settings as the file changes them, and survives a bad file;
// the others report no fault clock.
func TestFaultClockIsUnsafeAndReportedInStatus(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "clock.json")
	if err := os.WriteFile(ctl, []byte(`{"rate":1,"wall_offset_ns":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t, 3, func(c *Config) {
		if c.ID == "n2" {
			c.Clock = nil
			c.Unsafe.FaultClockFile = ctl
		}
	})
	ctx := ctxT(t)
	status := func(i int) *api.StatusResponse {
		t.Helper()
		st, err := tc.nodes[i].admin.Status(ctx, &api.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for i := range tc.nodes {
		st := status(i)
		want, wantFC := "insecure", false
		if i == 1 {
			want, wantFC = "insecure,fault-clock", true
		}
		if got := strings.Join(st.Unsafe, ","); got != want || (st.FaultClock != nil) != wantFC {
			t.Fatalf("%s: unsafe %q, fault clock %v; want %q, %v", st.Id, got, st.FaultClock, want, wantFC)
		}
	}
	if err := os.WriteFile(ctl, []byte(`{"rate":0.5,"wall_offset_ns":3600000000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "status reports the new settings", func() bool {
		fc := status(1).FaultClock
		return fc.GetRate() == 0.5 && fc.GetWallOffsetNs() == int64(time.Hour)
	})
	if err := os.WriteFile(ctl, []byte(`{"rate":`), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * FaultClockPoll)
	if fc := status(1).FaultClock; fc.GetRate() != 0.5 || fc.GetWallOffsetNs() != int64(time.Hour) {
		t.Fatalf("a bad file changed the clock: %v", fc)
	}
	if tc.nodes[1].Err() != nil {
		t.Fatalf("the node failed: %v", tc.nodes[1].Err())
	}
	if _, err := Start(Config{ID: "x", DataDir: t.TempDir(), Unsafe: UnsafeSettings{FaultClockFile: ctl}, Clock: NewManualClock()}); err == nil {
		t.Fatal("a fault clock file with an explicit Clock was accepted")
	}
}
