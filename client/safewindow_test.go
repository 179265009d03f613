package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// manualClock is a client Clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *manualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	c.mu.Unlock()
}

// answer is one Acquire answer the client received: the client-clock
// reading when its attempt was sent, and the ttl remaining it reported.
type answer struct{ sentAt, remaining time.Duration }

// safeWindowRun acquires a lease through a network that takes answerDelay
// (on the client's clock) to answer and loses the first answer (so the
// retry's answer is a replay, with less than the full ttl remaining), and
// returns the lease's safe deadline, the answer it was confirmed by and the
// client's drift and margin.
func safeWindowRun(t *testing.T, name string, tweak func(*client.Config)) (safeUntil time.Duration, a answer, drift float64, margin time.Duration) {
	t.Helper()
	const answerDelay = 300 * time.Millisecond
	clk := &manualClock{now: 1000 * time.Hour}
	var calls atomic.Int32
	var mu sync.Mutex
	var got []answer
	intercept := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent := clk.Now()
		err := invoker(ctx, m, req, reply, cc, opts...)
		if m != "/leasefence.v1.LeaseService/Acquire" {
			return err
		}
		clk.advance(answerDelay)
		if err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			return status.Error(codes.Unavailable, "injected: answer lost")
		}
		mu.Lock()
		got = append(got, answer{sent, reply.(*api.AcquireResponse).TtlRemaining.AsDuration()})
		mu.Unlock()
		return nil
	}
	cfg := client.Config{
		Endpoints:         []string{endpoint},
		Clock:             clk,
		Drift:             0.01, // large, so that ignoring it shows
		Margin:            250 * time.Millisecond,
		KeepAliveInterval: time.Hour,
		DialOptions:       []grpc.DialOption{grpc.WithUnaryInterceptor(intercept)},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "safewindow/"+name, client.WithTTL(10*time.Second), client.WithRequestID(fmt.Sprintf("safewindow-%s-%d", name, time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].remaining >= l.TTL() {
		t.Fatalf("answers %+v (ttl %v): want one replayed answer with less than the ttl left", got, l.TTL())
	}
	return client.SafeUntilOnClock(l), got[0], cfg.Drift, cfg.Margin
}

// checkSafeWindow is DESIGN's Time rule as a check: a lease's safe deadline
// lies no later than the send time of the attempt whose answer confirmed
// it, plus the ttl remaining that answer reported shrunk by the drift
// bound, minus the client margin.
func checkSafeWindow(safeUntil time.Duration, a answer, drift float64, margin time.Duration) error {
	bound := a.sentAt + time.Duration(float64(a.remaining)*(1-drift)) - margin
	if safeUntil > bound {
		return fmt.Errorf("safe deadline %v after sent_at + ttl_remaining×(1−drift) − margin = %v (by %v)", safeUntil, bound, safeUntil-bound)
	}
	return nil
}

// The client's safe deadline keeps the rule exactly, through a slow answer
// and a replay after a lost one.
func TestSafeDeadlineKeepsTheRuleThroughSlowAndReplayedAnswers(t *testing.T) {
	safe, a, drift, margin := safeWindowRun(t, "correct", nil)
	if err := checkSafeWindow(safe, a, drift, margin); err != nil {
		t.Fatal(err)
	}
	if bound := a.sentAt + time.Duration(float64(a.remaining)*(1-drift)) - margin; safe != bound {
		t.Fatalf("safe deadline %v, want exactly %v", safe, bound)
	}
}
