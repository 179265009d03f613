package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// reqAcquire is the request every test below first sends under request id
// "R": resource r, default scope, holder h, ttl 10 s, no wait.
func reqAcquire(id byte) *fsmpb.Acquire {
	return &fsmpb.Acquire{Resource: "r", Holder: "h", TtlNs: 10 * sec, RequestId: "R", LeaseId: leaseID(id)}
}

func acquireOf(a *fsmpb.Acquire) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}}
}

// changedParameters are retries of reqAcquire's request id with one
// parameter changed: each is another request.
var changedParameters = []struct {
	name   string
	change func(a *fsmpb.Acquire)
}{
	{"resource", func(a *fsmpb.Acquire) { a.Resource = "other" }},
	{"scope", func(a *fsmpb.Acquire) { a.Scope = "dk" }},
	{"holder", func(a *fsmpb.Acquire) { a.Holder = "h2" }},
	{"ttl", func(a *fsmpb.Acquire) { a.TtlNs = 20 * sec }},
	{"wait", func(a *fsmpb.Acquire) { a.Wait = true }},
}

// changedParameterViolations applies every changed retry to s at now (the
// stamp of s's last entry, so time does not move) and returns, per changed
// parameter, how it broke the rule: each must be refused as
// ErrRequestIDReused (an InvalidArgument), carry no lease and change
// nothing.
func changedParameterViolations(t testing.TB, s *State, now int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, tc := range changedParameters {
		before := snapshotBytes(t, s)
		a := reqAcquire(byte(100 + i))
		tc.change(a)
		r := apply(t, s, now, acquireOf(a))
		switch {
		case !errors.Is(r.Err, ErrRequestIDReused) || !errors.Is(r.Err, ErrInvalidArgument):
			out[tc.name] = fmt.Sprintf("want ErrRequestIDReused (invalid argument), got %+v", r)
		case r.Lease != (Lease{}) || r.Remaining != 0:
			out[tc.name] = fmt.Sprintf("a refused reuse carries a lease: %+v", r)
		case !bytes.Equal(before, snapshotBytes(t, s)):
			out[tc.name] = "a refused reuse changed the state"
		}
	}
	return out
}

func checkChangedParametersRefused(t *testing.T, s *State, now int64) {
	t.Helper()
	for name, v := range changedParameterViolations(t, s, now) {
		t.Errorf("request id reused with another %s: %s", name, v)
	}
}

// A request id names one request: a retry carries the same resource,
// scope (the effective one), holder, ttl and wait flag. A grant's request
// id with any parameter changed is refused, before and after a snapshot
// round trip; the same request is replayed.
func TestRequestIDOfAGrantWithAnyParameterChangedIsRefused(t *testing.T) {
	s := New()
	first := apply(t, s, 1*sec, acquireOf(reqAcquire(1)))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	checkChangedParametersRefused(t, s, 1*sec)
	// The same request again, the default scope named explicitly included:
	// the effective scope is what counts.
	same := reqAcquire(2)
	same.Scope = "r"
	if r := apply(t, s, 2*sec, acquireOf(same)); r.Err != nil || !r.Replayed || r.Lease != first.Lease {
		t.Fatalf("the same request: %+v", r)
	}
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	checkChangedParametersRefused(t, restored, 2*sec)
	if r := apply(t, restored, 3*sec, acquireOf(reqAcquire(3))); r.Err != nil || !r.Replayed || r.Lease != first.Lease {
		t.Fatalf("the same request after restore: %+v", r)
	}
}

// The same for a request id whose first outcome was a refusal: a changed
// retry is refused as invalid, not answered as held, before and after a
// snapshot round trip.
func TestRequestIDOfARefusalWithAnyParameterChangedIsRefused(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("r", 10*sec, 1, "holder"))
	var held *HeldError
	if r := apply(t, s, 1*sec, acquireOf(reqAcquire(2))); !errors.As(r.Err, &held) || r.Replayed {
		t.Fatalf("first attempt: %+v", r)
	}
	checkChangedParametersRefused(t, s, 1*sec)
	if r := apply(t, s, 2*sec, acquireOf(reqAcquire(3))); !errors.As(r.Err, &held) || !r.Replayed {
		t.Fatalf("the same request: %+v", r)
	}
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	checkChangedParametersRefused(t, restored, 2*sec)
	if r := apply(t, restored, 3*sec, acquireOf(reqAcquire(4))); !errors.As(r.Err, &held) || !r.Replayed {
		t.Fatalf("the same request after restore: %+v", r)
	}
}

// A replay of a grant whose lease has ended (released, expired, removed)
// is answered as ended, never as a live grant with no time left; before
// and after a snapshot round trip, and it changes nothing.
func TestReplayOfAnEndedGrantSaysEnded(t *testing.T) {
	ended := func(t *testing.T, s *State, now int64, first Lease) {
		t.Helper()
		if _, err := s.Apply(entry(t, now)); err != nil { // time moves on
			t.Fatal(err)
		}
		before := snapshotBytes(t, s)
		r := apply(t, s, now, acquireOf(reqAcquire(9)))
		var e *EndedError
		if !errors.As(r.Err, &e) || !errors.Is(r.Err, ErrLeaseEnded) {
			t.Fatalf("replay of an ended grant: want ErrLeaseEnded, got %+v", r)
		}
		if !r.Replayed || e.Lease.ID != first.ID || e.Lease.Token != first.Token || e.RequestID != "R" {
			t.Fatalf("ended replay: %+v (%+v), granted %+v", r, e, first)
		}
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("an ended replay changed the state")
		}
		rs, err := Restore(bytes.NewReader(snapshotBytes(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		if r := apply(t, rs, now, acquireOf(reqAcquire(9))); !errors.Is(r.Err, ErrLeaseEnded) || !r.Replayed {
			t.Fatalf("after restore: %+v", r)
		}
	}
	t.Run("released", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		apply(t, s, 2*sec, releaseCmd(1))
		ended(t, s, 3*sec, first)
	})
	t.Run("past expiry, not yet removed", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		ended(t, s, 11*sec, first) // exactly expires_at: no time left
		ended(t, s, 11*sec+1, first)
	})
	t.Run("expired and removed", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		apply(t, s, 12*sec, tickCmd())
		if s.Len() != 0 {
			t.Fatal("not expired")
		}
		ended(t, s, 12*sec, first)
	})
	t.Run("live", func(t *testing.T) {
		s := New()
		first := apply(t, s, 1*sec, acquireOf(reqAcquire(1))).Lease
		if r := apply(t, s, 11*sec-1, acquireOf(reqAcquire(2))); r.Err != nil || !r.Replayed || r.Lease != first || r.Remaining != 1 {
			t.Fatalf("replay of a live grant: %+v", r)
		}
	})
}
