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

// BenchmarkLeasesFirst500Of100k is the status page's scan: the first 500
// of 100 000 leases by resource (it runs under the state's read lock).
func BenchmarkLeasesFirst500Of100k(b *testing.B) {
	s := New()
	for i := 0; i < 100_000; i++ {
		c := acquireCmd(fmt.Sprintf("r/%06d", (i*7919)%100_000), 10*sec, 0, "")
		c.GetAcquire().LeaseId = []byte(fmt.Sprintf("%016d", i))
		if r := apply(b, s, sec, c); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if out, n := s.Leases("", 500); len(out) != 500 || n != 100_000 {
			b.Fatal(len(out), n)
		}
	}
}
