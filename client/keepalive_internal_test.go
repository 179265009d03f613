package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

type fakeClock struct{ now time.Duration }

func (c *fakeClock) Now() time.Duration { return c.now }

// recordingStream is a KeepAlive stream that records what is sent and
// never answers by itself: each message, and each renewal (a message's
// first and those in its more).
type recordingStream struct {
	api.LeaseService_KeepAliveClient
	msgs []*api.KeepAliveRequest
	sent []*api.KeepAliveRequest
}

func (s *recordingStream) Send(r *api.KeepAliveRequest) error {
	s.msgs = append(s.msgs, r)
	s.sent = append(append(s.sent, r), r.More...)
	return nil
}

// answerStream answers with the given responses, then ends.
type answerStream struct {
	api.LeaseService_KeepAliveClient
	resps []*api.KeepAliveResponse
}

func (s *answerStream) Recv() (*api.KeepAliveResponse, error) {
	if len(s.resps) == 0 {
		return nil, context.Canceled
	}
	r := s.resps[0]
	s.resps = s.resps[1:]
	return r, nil
}

// TestOneRenewalInFlightPerLease: a cluster slower to answer than the
// renewal schedule gets each lease's renewal once, not again every
// retryUnconfirmed; an answer frees the lease for its next renewal, a
// failed one makes it due again soon, and a stream that ends sends what was
// in flight again on the next.
func TestOneRenewalInFlightPerLease(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 2 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	const n = 100
	var leases []*Lease
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		l := &Lease{c: c, id: ID{byte(i), 1}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: time.Hour}
		leases = append(leases, l)
		k.add(l, 0)
	}
	send := func(at time.Duration) *recordingStream {
		t.Helper()
		clk.now = at
		st := &recordingStream{}
		if _, _, err := k.sendDue(st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if got := len(send(time.Second).sent); got != 0 {
		t.Fatalf("%d renewals sent before any was due", got)
	}
	first := send(2 * time.Second)
	if len(first.sent) != n {
		t.Fatalf("%d renewals sent when all %d were due", len(first.sent), n)
	}
	// No answers yet: nothing is sent again on this stream while the
	// cluster may still be working on them.
	for _, at := range []time.Duration{2600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second} {
		if got := len(send(at).sent); got != 0 {
			t.Fatalf("at %v with every renewal unanswered: %d sent again", at, got)
		}
	}
	// Answers at 5 s: every other one renewed, the rest failed
	// (Unavailable; never two in a row, which would end the stream).
	var resps []*api.KeepAliveResponse
	for i, r := range first.sent {
		resp := &api.KeepAliveResponse{Seq: r.Seq, LeaseId: r.LeaseId, TtlRemaining: durationpb.New(30 * time.Second)}
		if i%2 == 1 {
			resp.Code, resp.Message = int32(codes.Unavailable), "leader changed"
		}
		resps = append(resps, resp)
	}
	if err := k.receive(&answerStream{resps: resps}); err == nil {
		t.Fatal("receive returned without the stream's error")
	}
	if k.confirmed.Load() != n/2 {
		t.Fatalf("confirmed %d, want %d", k.confirmed.Load(), n/2)
	}
	// The renewed half is due at its interval from the send (2 s + 2 s,
	// passed), the failed half at its retry (5.5 s): both at 5.5 s.
	if got := len(send(5500 * time.Millisecond).sent); got != n {
		t.Fatalf("after the answers: %d sent, want %d", got, n)
	}
	// The stream breaks with all in flight: the next stream sends them
	// again at once.
	k.streamEnded()
	if got := len(send(5501 * time.Millisecond).sent); got != n {
		t.Fatalf("on a new stream: %d sent, want the %d in flight on the old one", got, n)
	}
	// A lease released while its renewal was in flight is not sent again.
	k.remove(leases[0])
	k.streamEnded()
	if got := len(send(5502 * time.Millisecond).sent); got != n-1 {
		t.Fatalf("after a release and a new stream: %d sent, want %d", got, n-1)
	}
}

// TestRenewalUnansweredForLongIsSentAgain: the one-in-flight rule has a
// net: a renewal left unanswered for resendUnanswered on a stream is sent
// again, once.
func TestRenewalUnansweredForLongIsSentAgain(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 2 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	k.add(&Lease{c: c, id: ID{1}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: time.Hour}, 0)
	count := func(at time.Duration) int {
		t.Helper()
		clk.now = at
		st := &recordingStream{}
		if _, _, err := k.sendDue(st); err != nil {
			t.Fatal(err)
		}
		return len(st.sent)
	}
	for _, step := range []struct {
		at   time.Duration
		want int
	}{
		{2 * time.Second, 1},                      // due
		{2*time.Second + resendUnanswered/2, 0},   // unanswered, but not for long
		{2*time.Second + resendUnanswered + 1, 1}, // unanswered for long: again
		{2*time.Second + resendUnanswered + time.Second, 0},
	} {
		if got := count(step.at); got != step.want {
			t.Fatalf("at %v: %d sent, want %d", step.at, got, step.want)
		}
	}
}

// TestSilenceCountsFromTheOldestOutstandingRenewal: a stream idle for
// longer than the silence bound is not silent when a renewal has just been
// sent on it; it is once that renewal goes unanswered, and an answer to
// any renewal resets the count.
func TestSilenceCountsFromTheOldestOutstandingRenewal(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 3 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	for i := byte(0); i < 2; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		k.add(&Lease{c: c, id: ID{i, 2}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: time.Hour}, time.Duration(i)*time.Second)
	}
	k.lastRecv.Store(0) // the stream opened at 0 and has been idle since
	at := func(now time.Duration, send bool) {
		t.Helper()
		clk.now = now
		if send {
			if _, _, err := k.sendDue(&recordingStream{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := k.silentFor(); got != 0 {
		t.Fatalf("nothing outstanding, silent for %v", got)
	}
	at(3*time.Second, true) // first lease's renewal, after 3 s of idleness
	if got := k.silentFor(); got != 0 {
		t.Fatalf("renewal just sent on an idle stream: silent for %v, want 0", got)
	}
	at(4*time.Second, true) // second lease's renewal: the first is still the oldest
	at(4500*time.Millisecond, false)
	if got := k.silentFor(); got != 1500*time.Millisecond {
		t.Fatalf("oldest renewal unanswered for 1.5 s: silent for %v", got)
	}
	k.lastRecv.Store(int64(4200 * time.Millisecond)) // an answer came (to either)
	if got := k.silentFor(); got != 300*time.Millisecond {
		t.Fatalf("answered at 4.2 s: silent for %v at 4.5 s, want 300ms", got)
	}
	k.streamEnded()
	if got := k.silentFor(); got != 0 {
		t.Fatalf("stream ended, nothing outstanding: silent for %v", got)
	}
}

// TestRenewalRefusedForOverloadIsRetriedBeforeTheSafeDeadline: a renewal
// the leader refused for overload (ResourceExhausted with retry_after) is
// neither a lost lease nor a failing node: the stream is kept, however
// many come in a row, and the lease is due again after the wait asked for,
// or sooner when its safe deadline is nearer than that.
func TestRenewalRefusedForOverloadIsRetriedBeforeTheSafeDeadline(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 2 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	const n = 10
	var leases []*Lease
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		safe := time.Hour
		if i == 0 {
			safe = 2*time.Second + 400*time.Millisecond // 400 ms left when refused
		}
		l := &Lease{c: c, id: ID{byte(i), 2}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: safe}
		leases = append(leases, l)
		k.add(l, 0)
	}
	clk.now = 2 * time.Second
	st := &recordingStream{}
	if _, _, err := k.sendDue(st); err != nil || len(st.sent) != n {
		t.Fatalf("sent %d (%v), want %d", len(st.sent), err, n)
	}
	const hint = 300 * time.Millisecond
	var resps []*api.KeepAliveResponse
	for _, r := range st.sent {
		resps = append(resps, &api.KeepAliveResponse{Seq: r.Seq, LeaseId: r.LeaseId,
			Code: int32(codes.ResourceExhausted), Message: "cluster: overloaded", RetryAfter: durationpb.New(hint)})
	}
	if err := k.receive(&answerStream{resps: resps}); err != context.Canceled {
		t.Fatalf("receive ended with %v, want the stream's own end: refusals for overload must not move the stream", err)
	}
	if k.deferred.Load() != n || k.refused.Load() != 0 {
		t.Fatalf("deferred %d, refused %d; want %d, 0", k.deferred.Load(), k.refused.Load(), n)
	}
	for i, l := range leases {
		if l.Err() != nil {
			t.Fatalf("lease %d ended by an overload refusal: %v", i, l.Err())
		}
		wait := l.nextRenew - clk.now
		switch {
		case i == 0 && (wait <= 0 || wait > 200*time.Millisecond):
			t.Fatalf("lease with 400 ms left: retried in %v, want within half of it", wait)
		case i > 0 && (wait < hint || wait > hint*3/2):
			t.Fatalf("lease %d retried in %v, want in [%v, %v]", i, wait, hint, hint*3/2)
		}
	}
	clk.now += hint * 3 / 2
	if got := len(k.sendDueOrFail(t).sent); got != n {
		t.Fatalf("after the wait asked for: %d sent again, want %d", got, n)
	}
}

func (k *keeper) sendDueOrFail(t *testing.T) *recordingStream {
	t.Helper()
	st := &recordingStream{}
	if _, _, err := k.sendDue(st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRenewalsDueTogetherGoInOneMessage: renewals due at once are sent as
// few messages (up to maxRenewalsPerMessage renewals each, the rest in
// more), and answers packed the same way are each taken: one message per
// renewal cost the client and the leader a gRPC send and receive each.
func TestRenewalsDueTogetherGoInOneMessage(t *testing.T) {
	const n = maxRenewalsPerMessage + 10
	k, clk := testKeeper(t, n, 3)
	clk.now = 2 * time.Second
	st := k.sendDueOrFail(t)
	if len(st.sent) != n || len(st.msgs) != 2 {
		t.Fatalf("%d renewals in %d messages, want %d in 2", len(st.sent), len(st.msgs), n)
	}
	if got := 1 + len(st.msgs[0].More); got != maxRenewalsPerMessage {
		t.Fatalf("first message carries %d renewals, want %d", got, maxRenewalsPerMessage)
	}
	seqs := map[uint64]bool{}
	for _, r := range st.sent {
		if len(r.More) > 0 && r != st.msgs[0] && r != st.msgs[1] {
			t.Fatal("a renewal in more carries more of its own")
		}
		seqs[r.Seq] = true
	}
	if len(seqs) != n {
		t.Fatalf("%d distinct seqs for %d renewals", len(seqs), n)
	}
	// One answer message for all of them: every renewal confirmed.
	answer := func(r *api.KeepAliveRequest) *api.KeepAliveResponse {
		return &api.KeepAliveResponse{Seq: r.Seq, LeaseId: r.LeaseId, TtlRemaining: durationpb.New(30 * time.Second)}
	}
	top := answer(st.sent[0])
	for _, r := range st.sent[1:] {
		top.More = append(top.More, answer(r))
	}
	if err := k.receive(&answerStream{resps: []*api.KeepAliveResponse{top}}); err != context.Canceled {
		t.Fatalf("receive ended with %v", err)
	}
	if k.confirmed.Load() != n {
		t.Fatalf("confirmed %d of %d renewals answered in one message", k.confirmed.Load(), n)
	}
}

// TestAnswersAfterFailuresInOneMessageAreTaken: two failed renewals in a
// row move the stream to another node, but the answers that came with
// them in the same message are still taken: renewals the cluster
// confirmed are not sent again or left to lapse.
func TestAnswersAfterFailuresInOneMessageAreTaken(t *testing.T) {
	const n = 10
	k, clk := testKeeper(t, n, 4)
	clk.now = 2 * time.Second
	st := k.sendDueOrFail(t)
	var top *api.KeepAliveResponse
	for i, r := range st.sent {
		a := &api.KeepAliveResponse{Seq: r.Seq, LeaseId: r.LeaseId, TtlRemaining: durationpb.New(30 * time.Second)}
		if i < 2 {
			a.Code, a.Message = int32(codes.Unavailable), "leader changed"
		}
		if top == nil {
			top = a
		} else {
			top.More = append(top.More, a)
		}
	}
	err := k.receive(&answerStream{resps: []*api.KeepAliveResponse{top}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("receive ended with %v, want Unavailable: two failures in a row move the stream", err)
	}
	if got := k.confirmed.Load(); got != n-2 {
		t.Fatalf("confirmed %d, want the %d renewals answered after the failures", got, n-2)
	}
}

// testKeeper is a keeper on a fake clock, renewing every 2 s, holding n
// leases (ids {i, i>>8, tag}, ttl 30 s, safe for an hour) added at 0.
func testKeeper(t *testing.T, n int, tag byte) (*keeper, *fakeClock) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 2 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		k.add(&Lease{c: c, id: ID{byte(i), byte(i >> 8), tag}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: time.Hour}, 0)
	}
	return k, clk
}

// The answer to a renewal of a lease that has since been removed, while
// a later lease of the same id (a replay of its request id) is kept,
// rescheduled by id: the removed lease's heap index (-1) panicked
// (reviewer). It touches only the lease it renewed.
func TestAnAnswerForARemovedLeaseLeavesALaterOneOfItsIDAlone(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk, cfg: Config{KeepAliveInterval: 2 * time.Second}}
	k := newKeeper(c)
	c.keeper = k
	lease := func() *Lease {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return &Lease{c: c, id: ID{7}, ttl: 30 * time.Second, ctx: ctx, cancel: cancel, safeUntil: time.Hour}
	}
	first := lease()
	k.add(first, 0)
	clk.now = 2 * time.Second
	st := &recordingStream{}
	if _, _, err := k.sendDue(st); err != nil || len(st.sent) != 1 {
		t.Fatalf("sent %d, %v", len(st.sent), err)
	}
	k.remove(first) // released, its renewal still out
	second := lease()
	if got := k.add(second, clk.now); got != second {
		t.Fatal("the later lease was not kept")
	}
	next := second.nextRenew
	k.answered(&api.KeepAliveResponse{Seq: st.sent[0].Seq, LeaseId: first.id[:], TtlRemaining: durationpb.New(30 * time.Second)}, clk.now)
	if second.nextRenew != next {
		t.Fatalf("the answer for the removed lease moved the later one's renewal from %v to %v", next, second.nextRenew)
	}
}

// An answer that reports more time left than the lease's ttl (no correct
// node sends one) moves the safe deadline by the ttl at most.
func TestAnAnswerCannotStretchTheSafeWindowPastTheTTL(t *testing.T) {
	clk := &fakeClock{}
	c := &Client{clock: clk}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	l := &Lease{c: c, id: ID{9}, ttl: 10 * time.Second, ctx: ctx, cancel: cancel}
	t.Cleanup(func() { l.end(ErrClosed) })
	clk.now = 5 * time.Second
	if !l.confirmAt(5*time.Second, time.Hour, clk.now) {
		t.Fatal("the lease ended on a renewal answered at once")
	}
	l.mu.Lock()
	safe := l.safeUntil
	l.mu.Unlock()
	if safe > 15*time.Second {
		t.Fatalf("safe until %v on the client clock: an answer of an hour left stretched a 10s lease sent at 5s", safe)
	}
}
