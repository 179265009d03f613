package client_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
)

// mustBe fails unless err is want and none of the other failover errors.
func mustBe(t *testing.T, err, want error) {
	t.Helper()
	for _, s := range []error{client.ErrUnavailable, client.ErrNoLeader, client.ErrIndeterminate} {
		if errors.Is(err, s) != (s == want) {
			t.Fatalf("got %v; want an error that is %v (and not the others)", err, want)
		}
	}
}

// With two of three nodes down, the survivor answers but knows no leader:
// the caller hears "no leader", not "unreachable" and not "outcome
// unknown" (nothing could have been granted).
func TestAcquireWithoutQuorumFailsWithNoLeader(t *testing.T) {
	c := startCluster(t)
	li := c.Leader()
	survivor := (li + 1) % 3
	for i := range c.Procs {
		if i != survivor {
			c.Kill(i, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := c.Status(survivor); err == nil && st.State != "leader" && st.LeaderAddr == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the survivor still names a leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cl := newClient(t, c, func(cfg *client.Config) { cfg.RetryFor = 2 * time.Second })
	_, err := cl.Acquire(ctxFor(t, 10*time.Second), "noquorum", client.WithTTL(5*time.Second))
	mustBe(t, err, client.ErrNoLeader)
}

// With every node silent (frozen: connections accepted, nothing answered),
// an Acquire may have arrived: its outcome is unknown and the error names
// the request id; a read only says that nothing answered. Once the nodes
// resume, retrying with that request id gets a lease.
func TestAcquireWithEveryNodeSilentIsIndeterminate(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c, func(cfg *client.Config) { cfg.RetryFor = 2 * time.Second })
	if _, err := cl.Get(ctxFor(t, 10*time.Second), "warm"); err != nil {
		t.Fatal(err)
	}
	for i := range c.Procs {
		c.Signal(i, syscall.SIGSTOP)
	}
	resumed := false
	resume := func() {
		if !resumed {
			for i := range c.Procs {
				c.Signal(i, syscall.SIGCONT)
			}
			resumed = true
		}
	}
	defer resume()
	// A ttl long enough that the grant the frozen nodes make once resumed
	// is still live when the retry arrives on a loaded machine.
	_, err := cl.Acquire(ctxFor(t, 10*time.Second), "silent", client.WithTTL(60*time.Second), client.WithRequestID("silent-req-1"))
	mustBe(t, err, client.ErrIndeterminate)
	var ie *client.IndeterminateError
	if !errors.As(err, &ie) || ie.RequestID != "silent-req-1" {
		t.Fatalf("got %v; want an *IndeterminateError naming request id silent-req-1", err)
	}
	_, err = cl.Get(ctxFor(t, 10*time.Second), "silent")
	mustBe(t, err, client.ErrUnavailable)

	resume()
	l, err := cl.Acquire(ctxFor(t, 20*time.Second), "silent", client.WithTTL(60*time.Second), client.WithRequestID("silent-req-1"))
	if err != nil {
		t.Fatalf("retry with the request id after the nodes resumed: %v", err)
	}
	l.Release(context.Background())
}

// With every node down (connections refused), nothing was sent: the
// caller hears "unreachable", not "outcome unknown".
func TestAcquireWithEveryNodeDownIsUnreachable(t *testing.T) {
	c := startCluster(t)
	for i := range c.Procs {
		c.Kill(i, syscall.SIGKILL)
	}
	cl := newClient(t, c, func(cfg *client.Config) { cfg.RetryFor = time.Second })
	_, err := cl.Acquire(ctxFor(t, 10*time.Second), "down", client.WithTTL(5*time.Second))
	mustBe(t, err, client.ErrUnavailable)
}
