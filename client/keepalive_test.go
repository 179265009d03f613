package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
)

// Thousands of leases renewed far faster than the cluster can answer fill
// the stream's flow-control window both ways. The keeper must keep
// draining answers while it sends, and a new Acquire must still go
// through. (A keeper that held its lock across Send deadlocked here.)
func TestKeepAliveUnderBackpressureNeverBlocksAcquire(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the embedded node")
	}
	c, err := client.New(client.Config{Endpoints: []string{endpoint}, KeepAliveInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var leases sync.Map
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < 3000; i += 32 {
				l, err := c.Acquire(ctx, fmt.Sprintf("bp/%d", i), client.WithTTL(30*time.Second))
				if err != nil {
					t.Errorf("acquire %d: %v", i, err)
					return
				}
				leases.Store(i, l)
			}
		}(w)
	}
	wg.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Acquire(actx, "bp/probe", client.WithTTL(30*time.Second))
		acancel()
		if err != nil {
			t.Fatalf("acquire under keep-alive load: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st.RenewalsConfirmed == 0 || st.Leases != 3000 {
		t.Fatalf("stats %+v", st)
	}
	leases.Range(func(_, v any) bool {
		_ = v.(*client.Lease).Release(ctx)
		return true
	})
}

// A retry whose request id replays a lease that has since ended must not
// look like a fresh grant.
func TestReplayOfEndedLeaseIsReportedLost(t *testing.T) {
	c, ctx := embeddedClient(t, 20*time.Second)
	l, err := c.Acquire(ctx, "replay/ended", client.WithRequestID("req-replay-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "replay/ended", client.WithRequestID("req-replay-1"))
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("replay of a released lease: %v", err)
	}
}

// At the default ttl (10 s, a renewal every 3.3 s) the stream is idle
// between renewals. Idleness is not silence: a renewal just sent on a
// stream that has not spoken for 3 s has not gone unanswered. Over 30 s
// one lease needs one stream and one send per renewal. (Silence measured
// from the last answer closed the stream, moved to the next node and sent
// the renewal twice on nearly every renewal.)
func TestIdleKeepAliveStreamIsKeptAndEachRenewalSentOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 30 s")
	}
	c, ctx := embeddedClient(t, 60*time.Second)
	l, err := c.Acquire(ctx, "idle/stream") // default ttl
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	const window = 30 * time.Second
	interval := l.TTL() / 3
	select {
	case <-l.Done():
		t.Fatalf("lease ended: %v", l.Err())
	case <-time.After(window):
	}
	st := c.Stats()
	t.Logf("after %v: %+v", window, st)
	want := uint64(window / interval) // renewals due in the window
	if st.Streams != 1 {
		t.Errorf("%d keep-alive streams opened, want 1", st.Streams)
	}
	if st.RenewalsSent < want-1 || st.RenewalsSent > want+1 {
		t.Errorf("%d renewals sent in %v at one per %v, want %d±1", st.RenewalsSent, window, interval, want)
	}
	if st.RenewalsSent > st.RenewalsConfirmed+1 {
		t.Errorf("%d renewals sent for %d confirmed: renewals were sent twice", st.RenewalsSent, st.RenewalsConfirmed)
	}
}
