package fsm

import (
	"fmt"
	"slices"
	"testing"
)

// Leases lists the leases under a prefix in resource order, at most limit
// of them (the first by resource), and counts every match.
func TestLeasesListsTheFirstUnderAPrefixInOrder(t *testing.T) {
	s := New()
	var want []string
	for i := 0; i < 40; i++ {
		res := fmt.Sprintf("jobs/%02d", (i*7)%40) // applied out of order
		if r := apply(t, s, sec, acquireCmd(res, 10*sec, byte(i+1), "")); r.Err != nil {
			t.Fatal(r.Err)
		}
		want = append(want, res)
	}
	apply(t, s, sec, acquireCmd("other/1", 10*sec, 100, ""))
	slices.Sort(want)
	names := func(ls []Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Resource)
		}
		return out
	}
	if got, n := s.Leases("jobs/", 5); n != 40 || !slices.Equal(names(got), want[:5]) {
		t.Fatalf("Leases(jobs/, 5) = %v, %d; want %v, 40", names(got), n, want[:5])
	}
	if got, n := s.Leases("jobs/", 0); n != 40 || !slices.Equal(names(got), want) {
		t.Fatalf("Leases(jobs/, 0) = %v, %d", names(got), n)
	}
	if got, n := s.Leases("", 100); n != 41 || len(got) != 41 || got[40].Resource != "other/1" {
		t.Fatalf("Leases(\"\", 100): %d matched, %v", n, names(got))
	}
	if got, n := s.Leases("none/", 10); n != 0 || len(got) != 0 {
		t.Fatalf("Leases(none/) = %v, %d", got, n)
	}
}
