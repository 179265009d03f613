package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
)

// acquireAll starts n Acquires of distinct resources on c, and returns a
// channel that gets one error (or nil) per Acquire as it finishes.
func acquireAll(t *testing.T, c api.LeaseServiceClient, prefix string, n int) <-chan error {
	done := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Acquire(ctxT(t), acquireReq(fmt.Sprintf("%s/%d", prefix, i), 10*time.Second))
			done <- err
		}()
	}
	return done
}

// waitQueued waits until want proposals wait in the leader's queue.
func waitQueued(t *testing.T, n *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.proposeCh) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d proposals queued; want %d", len(n.proposeCh), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// While an entry of the group commit is in Raft, the next batch waits and
// grows: the commands arriving meanwhile go as one entry when it has
// applied, not as an entry each behind each other's log syncs.
func TestGroupCommitKeepsOneEntryInFlight(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.Tick = time.Hour }) // no tick in between
	li, ln := tc.leader()
	c := tc.client(li)
	if _, err := c.Acquire(ctxT(t), acquireReq("gc/warm", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ln.inflight <- struct{}{} // an entry in flight, as far as the loop knows
	before := ln.raft.LastIndex()
	done := acquireAll(t, c, "gc/one", 10)
	waitQueued(t, ln, 9) // the loop holds the first, waiting for the entry
	if got := ln.raft.LastIndex(); got != before {
		t.Fatalf("%d entries went to Raft while one was in flight; want none", got-before)
	}
	<-ln.inflight
	for range 10 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := ln.raft.LastIndex(); got != before+1 {
		t.Errorf("10 commands that waited together took %d entries; want 1", got-before)
	}
}

// A full batch does not wait for the entry in flight: a backlog still
// pipelines, so the wait never caps the rate at one batch per commit.
func TestGroupCommitSendsFullBatchesAtOnce(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxBatch, c.Tick = 4, time.Hour })
	li, ln := tc.leader()
	c := tc.client(li)
	if _, err := c.Acquire(ctxT(t), acquireReq("gc/warm", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ln.inflight <- struct{}{}
	var once sync.Once
	release := func() { once.Do(func() { <-ln.inflight }) }
	defer release()
	before := ln.raft.LastIndex()
	done := acquireAll(t, c, "gc/full", 10)
	// Two full batches of 4 go while the token is held; the last 2 wait.
	for i := range 8 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of the 8 commands in full batches finished while an entry was in flight", i)
		}
	}
	// The last two: one held by the loop, waiting for the token, one
	// queued behind it; neither went to Raft.
	waitQueued(t, ln, 1)
	if got := ln.raft.LastIndex(); got != before+2 {
		t.Fatalf("%d entries went to Raft while one was in flight; want the 2 full batches", got-before)
	}
	select {
	case err := <-done:
		t.Fatalf("a command of a partial batch finished while an entry was in flight (%v)", err)
	default:
	}
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
