package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGKILL a random node at a random moment, dozens of times, under a write
// load: every acknowledged grant survives (its token stays counted, tokens
// never regress) and every killed node's data dir opens again and catches
// up.
func TestRandomSigkillsUnderLoadLoseNoAcknowledgedGrant(t *testing.T) {
	c := startCluster(t, 3)
	rng := rand.New(rand.NewPCG(7, 11))
	const workers = 3
	var mu sync.Mutex
	acked := map[string][]uint64{} // resource -> acknowledged tokens in order
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// A lease whose release failed (or whose grant was lost with
			// its answer) holds its resource for the ttl: move on to a
			// fresh resource then, instead of being refused until the end.
			gen := 0
			resource := fmt.Sprintf("crash/%d/%d", w, gen)
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				reqID := fmt.Sprintf("crash-%d-%d", w, i)
				r, err := c.Acquire(resource, 10*time.Second, reqID)
				if err != nil {
					gen++ // unknown outcome: not acknowledged
					resource = fmt.Sprintf("crash/%d/%d", w, gen)
					continue
				}
				mu.Lock()
				acked[resource] = append(acked[resource], r.Lease.Token)
				mu.Unlock()
				if c.Release(r.Lease.Id) != nil {
					gen++
					resource = fmt.Sprintf("crash/%d/%d", w, gen)
				}
			}
		}(w)
	}
	// At least 24 kills, and on until 50 grants were acknowledged under
	// them (bounded by a minute): how many land between kills is luck.
	ackedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ts := range acked {
			n += len(ts)
		}
		return n
	}
	kills := 0
	for start := time.Now(); kills < 24 || (ackedSoFar() < 50 && time.Since(start) < time.Minute); kills++ {
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		i := rng.IntN(len(c.Procs))
		c.Kill(i, syscall.SIGKILL)
		c.Start(i) // the data dir must open again
	}
	close(stop)
	wg.Wait()
	li := c.Leader()
	ls, err := c.Status(li)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Procs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := c.Status(i)
			if err == nil && st.AppliedIndex >= ls.CommitIndex {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d did not recover after %d kills", i+1, kills)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	total := 0
	for resource, tokens := range acked {
		total += len(tokens)
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("%s: token %d acknowledged after %d", resource, tokens[i], tokens[i-1])
			}
		}
		g, err := c.Get(resource)
		if err != nil {
			t.Fatal(err)
		}
		if last := tokens[len(tokens)-1]; g.ScopeToken < last {
			t.Fatalf("%s: acknowledged token %d lost (counter %d)", resource, last, g.ScopeToken)
		}
	}
	if total < 50 {
		t.Fatalf("only %d acknowledged grants: the load did not run", total)
	}
	t.Logf("%d SIGKILLs, %d acknowledged grants, none lost", kills, total)
}
