package netns

import (
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inNS runs f on a thread that has joined namespace ns; sockets f creates
// stay in ns afterwards.
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := syscall.Open("/run/netns/"+ns, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("open %s: %v", ns, err)
			return
		}
		defer syscall.Close(fd)
		if _, _, e := syscall.RawSyscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0); e != 0 {
			t.Errorf("setns %s: %v", ns, e)
			return
		}
		f()
	}()
	<-done
}

// sysSetns is setns(2)'s number (syscall has no constant for it).
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268}[runtime.GOARCH]

func TestNamespaceModeCutsOnlyNodeToNodeTraffic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("namespace mode needs root")
	}
	if sysSetns == 0 {
		t.Skip("setns number unknown on " + runtime.GOARCH)
	}
	n, err := NewNSNet([]string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		if l := Output(IPBin, "netns", "list"); strings.Contains(l, n.ns["a"]) || strings.Contains(Output(IPBin, "-o", "link"), n.bridge) {
			t.Errorf("left behind after Close: %s", l)
		}
	}()
	var ln net.Listener
	inNS(t, n.ns["b"], func() { ln, err = net.Listen("tcp", n.Addr("b")) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	dialFrom := func(ns string) error {
		var err error
		dial := func() {
			var c net.Conn
			if c, err = net.DialTimeout("tcp", n.Addr("b"), time.Second); err == nil {
				c.SetReadDeadline(time.Now().Add(time.Second))
				buf := make([]byte, 2)
				_, err = c.Read(buf)
				c.Close()
			}
		}
		if ns == "" {
			dial()
		} else {
			inNS(t, ns, dial)
		}
		return err
	}
	if err := dialFrom(n.ns["a"]); err != nil {
		t.Fatalf("a cannot reach b before any fault: %v", err)
	}
	if err := n.Partition(map[string][]string{"b": {"a"}}); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(n.ns["a"]); err == nil {
		t.Fatal("a reached b across the partition")
	}
	if st := n.Stats(); st.Held["a->b"] == 0 {
		t.Fatalf("stats: no packet from a to b dropped: %+v", st)
	}
	if err := dialFrom(""); err != nil {
		t.Fatalf("a client in the root namespace lost b during the partition: %v", err)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(n.ns["a"]); err != nil {
		t.Fatalf("a cannot reach b after heal: %v", err)
	}
	if err := n.Flaky(1); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(n.ns["a"]); err == nil {
		t.Fatal("flaky with p=1 let a connection through")
	}
	if st := n.Stats(); st.Reset == 0 {
		t.Fatalf("stats: no packet reset: %+v", st)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	t.Log(n.Describe())
}
