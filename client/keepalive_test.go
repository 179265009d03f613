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
	c, err := client.New(client.Config{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
