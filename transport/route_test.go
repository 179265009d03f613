package transport

import (
	"testing"

	"github.com/hashicorp/raft"
)

// The unsafe peer route (fault injection) makes the client half dial the
// substitute address while raft keeps using the peer's own.
func TestPeerRouteDialsTheSubstituteAddress(t *testing.T) {
	b := startNode(t, "127.0.0.1:0", nil)
	const ghost = raft.ServerAddress("127.0.0.1:1") // nothing listens there
	a := startNode(t, "127.0.0.1:0", func(c *Config) {
		c.PeerRoutes = map[raft.ServerAddress]string{ghost: string(b.addr)}
	})
	seen := answerOne(t, b.tr, &raft.TimeoutNowResponse{}, nil)
	if err := a.tr.TimeoutNow("b", ghost, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}); err != nil {
		t.Fatalf("timeout-now through the route: %v", err)
	}
	<-seen

	bad := Config{LocalAddr: "x", PeerRoutes: map[raft.ServerAddress]string{ghost: ""}}
	if err := bad.Validate(); err == nil {
		t.Fatal("an empty route target was accepted")
	}
}
