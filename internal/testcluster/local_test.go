package testcluster

import (
	"io"
	"net"
	"testing"
	"time"
)

// A cut link closes what it carries and refuses new connections; a healed
// one carries again.
func TestLinkCutsAndHeals(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	l, err := newLink(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.stop()
	roundTrip := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_, err := c.Read(make([]byte, 1))
		return err
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	open := dial()
	if err := roundTrip(open); err != nil {
		t.Fatalf("through the link: %v", err)
	}
	l.setCut(true)
	if err := roundTrip(open); err == nil {
		t.Fatal("a connection survived the cut")
	}
	if err := roundTrip(dial()); err == nil {
		t.Fatal("a new connection passed a cut link")
	}
	l.setCut(false)
	if err := roundTrip(dial()); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}
