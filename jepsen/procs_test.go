package jepsen

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFreeAddrsAvoidTheEphemeralRange: the ports are not ones the kernel
// may hand an outgoing connection as its local port at any moment.
func TestFreeAddrsAvoidTheEphemeralRange(t *testing.T) {
	lo, hi := quietPorts()
	if lo == hi {
		t.Skip("no room outside the ephemeral range on this host")
	}
	addrs, err := FreeAddrs(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		_, ps, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(ps)
		if p < lo || p >= hi {
			t.Errorf("%s is outside [%d, %d)", a, lo, hi)
		}
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

// TestStartClusterRetriesWhenAnAddressIsTaken takes node n2's address
// between FreeAddrs and the nodes' start (what another process did once:
// "bind: address already in use"); the cluster still starts, on new
// addresses, and the taken one is not among them.
func TestStartClusterRetriesWhenAnAddressIsTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts leased")
	}
	bin := t.TempDir()
	if err := Build(context.Background(), bin, false, false, false); err != nil {
		t.Fatal(err)
	}
	var taken net.Listener
	var takenAddr string
	addrsHook = func(addrs []string) {
		if taken != nil {
			return
		}
		l, err := net.Listen("tcp", addrs[1])
		if err != nil {
			t.Errorf("take %s: %v", addrs[1], err)
			return
		}
		taken, takenAddr = l, addrs[1]
	}
	defer func() { addrsHook = nil }()
	defer func() {
		if taken != nil {
			taken.Close()
		}
	}()
	dir := t.TempDir()
	c, err := StartCluster(context.Background(), filepath.Join(bin, "leased"), dir, 3, []string{"--tick", "250ms"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if taken == nil {
		t.Fatal("the hook took no address")
	}
	for _, id := range c.Nodes() {
		if !c.Proc(id).Running() {
			t.Errorf("%s is not running:\n%s", id, c.Proc(id).Tail(1024))
		}
	}
	for _, a := range c.Endpoints() {
		if a == takenAddr {
			t.Fatalf("the cluster runs on the taken address %s", a)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "n2.log"))
	if !strings.Contains(string(log), "address already in use") {
		t.Errorf("n2's log does not show the failed first start:\n%s", log)
	}
}
