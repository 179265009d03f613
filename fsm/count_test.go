package fsm

import "testing"

func TestCountHeldCountsLiveLeasesOfMatchingHolders(t *testing.T) {
	s := New()
	apply(t, s, 1*sec, acquireCmd("a/1", 10*sec, 1, ""))
	apply(t, s, 1*sec, acquireCmd("a/2", 5*sec, 2, ""))
	apply(t, s, 1*sec, acquireCmd("b/1", 10*sec, 3, ""))
	isA := func(h string) bool { return len(h) > 4 && h[:4] == "h-a/" }
	if got := s.CountHeld(isA); got != 2 {
		t.Fatalf("count = %d, want 2", got)
	}
	apply(t, s, 2*sec, releaseCmd(1))
	if got := s.CountHeld(isA); got != 1 {
		t.Fatalf("after a release: count = %d, want 1", got)
	}
	// Past expires_at (not yet removed by a tick) the lease no longer counts.
	apply(t, s, 7*sec, renewCmd(3))
	if got := s.CountHeld(isA); got != 0 {
		t.Fatalf("after expiry: count = %d, want 0", got)
	}
	if got := s.CountHeld(func(string) bool { return true }); got != 1 {
		t.Fatalf("all holders: count = %d, want 1", got)
	}
}
