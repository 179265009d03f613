package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A rolling restart (SIGTERM, restart, catch up; one node at a time) under
// a steady load loses no acknowledged grant or release, and no token
// regresses.
func TestRollingRestartUnderLoadLosesNothing(t *testing.T) {
	c := startCluster(t, 3)
	type ack struct {
		token    uint64
		released bool
	}
	const workers = 4
	acks := make([][]ack, workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			resource := fmt.Sprintf("roll/%d", w)
			deadline := time.Now().Add(90 * time.Second)
			for i := 0; time.Now().Before(deadline) && i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				reqID := fmt.Sprintf("roll-%d-%d", w, i)
				r, err := c.Acquire(resource, 10*time.Second, reqID)
				if err != nil {
					t.Errorf("worker %d acquire %d: %v", w, i, err)
					return
				}
				acks[w] = append(acks[w], ack{token: r.Lease.Token})
				if err := c.Release(r.Lease.Id); err != nil {
					t.Errorf("worker %d release %d: %v", w, i, err)
					return
				}
				acks[w][len(acks[w])-1].released = true
			}
		}(w)
	}
	time.Sleep(500 * time.Millisecond) // some load before the first restart
	for i := range c.Procs {
		c.Kill(i, syscall.SIGTERM)
		c.Start(i)
		// Wait until the restarted node has caught up with the leader.
		deadline := time.Now().Add(30 * time.Second)
		for {
			li := c.Leader()
			ls, err1 := c.Status(li)
			st, err2 := c.Status(i)
			if err1 == nil && err2 == nil && st.AppliedIndex >= ls.CommitIndex {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d did not catch up", i+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond) // some load after the last one
	close(stop)
	wg.Wait()
	total := 0
	for w, as := range acks {
		total += len(as)
		for i := 1; i < len(as); i++ {
			if as[i].token <= as[i-1].token {
				t.Fatalf("worker %d: token %d after %d", w, as[i].token, as[i-1].token)
			}
		}
		if len(as) == 0 {
			t.Fatalf("worker %d made no progress", w)
		}
		// Every acknowledged grant is still counted, and every
		// acknowledged release still holds: the resource is free.
		g, err := c.Get(fmt.Sprintf("roll/%d", w))
		if err != nil {
			t.Fatal(err)
		}
		last := as[len(as)-1]
		if g.ScopeToken < last.token {
			t.Fatalf("worker %d: scope counter %d below acknowledged token %d", w, g.ScopeToken, last.token)
		}
		if last.released && g.Lease != nil && g.Lease.Token <= last.token {
			t.Fatalf("worker %d: acknowledged release of token %d lost (lease %d held)", w, last.token, g.Lease.Token)
		}
	}
	t.Logf("%d acknowledged acquire+release cycles across a rolling restart of 3 nodes", total)
}
