package loopback

import (
	"net"
	"testing"
)

func TestFreeAddrsAreDistinctAndBindable(t *testing.T) {
	addrs, err := FreeAddrs(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s returned twice", a)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		l.Close()
	}
}
