package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// busyNode is a node on a real loopback gRPC listener whose Status refuses
// the first refusals calls for overload, as a leader with its admission
// budget spent does (cluster/errors.go), and records when each call came.
type busyNode struct {
	api.UnimplementedClusterServiceServer
	hint     time.Duration
	refusals int

	mu    sync.Mutex
	calls []time.Time
}

func (n *busyNode) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, time.Now())
	if len(n.calls) > n.refusals {
		return &api.StatusResponse{}, nil
	}
	st, err := status.New(codes.ResourceExhausted, "cluster: overloaded: nothing was proposed").WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(n.hint)},
		&errdetails.ErrorInfo{Reason: api.ReasonOverloaded, Domain: api.ErrorDomain})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

func serveBusy(t *testing.T, n *busyNode) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterClusterServiceServer(srv, n)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

// TestCallRefusedForOverloadWaitsAsAskedThenSucceeds: a call the leader
// refuses for overload is sent again to the same node, each time no sooner
// than the retry hint it carried, and succeeds once the node accepts it;
// one refused until RetryFor passes fails with ErrOverloaded, not as an
// unreachable cluster nor with an unknown outcome (nothing was proposed).
func TestCallRefusedForOverloadWaitsAsAskedThenSucceeds(t *testing.T) {
	const hint = 150 * time.Millisecond
	call := func(t *testing.T, n *busyNode, retryFor time.Duration) error {
		addr := serveBusy(t, n)
		return invokeStatusWith(t, client.Config{Endpoints: []string{addr}, RetryFor: retryFor}, 20*time.Second, client.Mutation())
	}
	t.Run("accepted after refusals", func(t *testing.T) {
		n := &busyNode{hint: hint, refusals: 3}
		if err := call(t, n, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if len(n.calls) != 4 {
			t.Fatalf("%d calls, want 3 refused and 1 accepted", len(n.calls))
		}
		for i := 1; i < len(n.calls); i++ {
			if gap := n.calls[i].Sub(n.calls[i-1]); gap < hint {
				t.Fatalf("call %d sent %v after a refusal that asked for %v", i+1, gap, hint)
			}
		}
	})
	t.Run("refused until RetryFor passes", func(t *testing.T) {
		n := &busyNode{hint: hint, refusals: 1 << 30}
		err := call(t, n, time.Second)
		if !errors.Is(err, client.ErrOverloaded) || errors.Is(err, client.ErrIndeterminate) || errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("got %v, want ErrOverloaded alone", err)
		}
		if len(n.calls) < 2 {
			t.Fatalf("%d calls within RetryFor 1s and a %v hint: not retried", len(n.calls), hint)
		}
	})
}
