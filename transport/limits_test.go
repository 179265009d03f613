package transport

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestLimitsDefaultsAndChecks(t *testing.T) {
	if err := (Limits{}).WithDefaults().Check(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	if d := (Limits{}).WithDefaults(); d != DefaultLimits() {
		t.Fatalf("zero limits became %+v, want %+v", d, DefaultLimits())
	}
	for _, tc := range []struct {
		name string
		l    Limits
		want string
	}{
		{"negative connections", Limits{MaxConnections: -1}, "max connections"},
		{"negative handshake timeout", Limits{HandshakeTimeout: -time.Second}, "handshake timeout"},
		{"negative idle timeout", Limits{IdleTimeout: -time.Second}, "idle timeout"},
		{"few streams", Limits{MaxStreamsPerConnection: 4}, "max streams"},
		{"client message below a valid request", Limits{MaxClientMessage: 1024}, "max client message 1024"},
		{"peer message below a snapshot chunk", Limits{MaxPeerMessage: 64 << 10}, "max peer message"},
		{"client above peer", Limits{MaxClientMessage: 8 << 20, MaxPeerMessage: 4 << 20}, "exceeds max peer message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.WithDefaults().Check()
			if !errors.Is(err, ErrLimits) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrLimits naming %q", err, tc.want)
			}
		})
	}
}

// HandshakenTLS serves only connections the port took through TLS.
func TestHandshakenTLSRefusesOtherConnections(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := HandshakenTLS().ServerHandshake(a); !errors.Is(err, errNotHandshaken) {
		t.Fatalf("plain connection: got %v, want errNotHandshaken", err)
	}
	if _, _, err := HandshakenTLS().ClientHandshake(t.Context(), "x", a); err == nil {
		t.Fatal("HandshakenTLS dialled")
	}
}

// A plaintext port hands connections to Clients() up to its cap, refuses
// the rest at once, counts them, and gives a slot back when one closes.
func TestPlaintextPortCapsConnections(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPort(lis, PortConfig{MaxConnections: 2})
	defer p.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := p.Clients().Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	served := []net.Conn{<-accepted, <-accepted}
	third := dial()
	_ = third.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("third connection past a cap of 2: read %v, want closed", err)
	}
	if st := p.Stats(); st.Clients != 2 || st.Refused != 1 {
		t.Fatalf("stats %+v, want 2 open and 1 refused", st)
	}
	served[0].Close()
	if st := p.Stats(); st.Clients != 1 {
		t.Fatalf("after a close: stats %+v, want 1 open", st)
	}
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("a connection after a slot was freed was not handed over")
	}
	served[1].Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
