package fsm

import "testing"

// A renewal leaves the expiry heap alone: NextExpiry may then report the
// renewed lease's old expiry (a lower bound), and the next Tick settles it
// without expiring anything early. Expiry order is what it was: the lease
// that was not renewed goes first, the renewed one at its new time.
func TestRenewalLeavesTheHeapToTheNextTick(t *testing.T) {
	s := New()
	apply(t, s, 0, acquireCmd("a", 2*sec, 1, ""))
	apply(t, s, 0, acquireCmd("b", 3*sec, 2, ""))
	if exp, ok := s.NextExpiry(); !ok || exp != 2*sec {
		t.Fatalf("NextExpiry = %d, %v; want a's 2s", exp, ok)
	}
	// a renewed at 1s: expires at 3s, as b does; the heap still says 2s.
	if r := apply(t, s, sec, renewCmd(1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if exp, _ := s.NextExpiry(); exp != 2*sec {
		t.Fatalf("NextExpiry after a renewal = %d, want the stale 2s (a lower bound)", exp)
	}
	// Past a's old expiry and margin: nothing expires, and the heap is
	// settled (a and b both at 3s).
	if r := apply(t, s, 2*sec+testMargin+1, tickCmd()); r.Expired != 0 {
		t.Fatalf("tick expired %d leases, want 0 (a was renewed)", r.Expired)
	}
	if exp, _ := s.NextExpiry(); exp != 3*sec {
		t.Fatalf("NextExpiry after the tick = %d, want 3s", exp)
	}
	// Renew b, then tick past 3s + margin: a goes
	// (the earliest by expires_at, then resource), b stays.
	if r := apply(t, s, 2*sec+testMargin+1, renewCmd(2)); r.Err != nil {
		t.Fatal(r.Err)
	}
	a, err := s.Apply(entry(t, 3*sec+testMargin+1, tickCmd()))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Events) != 1 || a.Events[0].Type != EventExpired || a.Events[0].Lease.Resource != "a" {
		t.Fatalf("events %+v, want a expired", a.Events)
	}
	if _, held := s.Lease("b"); !held {
		t.Fatal("b, renewed, was expired")
	}
	if exp, _ := s.NextExpiry(); exp != 5*sec+testMargin+1 {
		t.Fatalf("NextExpiry = %d, want b's renewed expiry %d", exp, 5*sec+testMargin+1)
	}
}
