package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// statusNode is a node on a real loopback gRPC listener whose Status
// answers with err.
type statusNode struct {
	api.UnimplementedClusterServiceServer
	err error
}

func (n *statusNode) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	return nil, n.err
}

func serveStatus(t *testing.T, err error) string {
	t.Helper()
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	srv := grpc.NewServer()
	api.RegisterClusterServiceServer(srv, &statusNode{err: err})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

func statusWith(t *testing.T, c codes.Code, msg string, detail *api.NotLeader) error {
	t.Helper()
	st := status.New(c, msg)
	if detail != nil {
		var err error
		if st, err = st.WithDetails(detail); err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

func invokeStatus(t *testing.T, endpoints []string, opts ...client.InvokeOption) error {
	t.Helper()
	return invokeStatusWith(t, client.Config{Endpoints: endpoints, RetryFor: 200 * time.Millisecond}, 10*time.Second, opts...)
}

// invokeStatusWith calls ClusterService.Status through Invoke with a fresh
// client of cfg, waiting at most d, and returns Invoke's error.
func invokeStatusWith(t *testing.T, cfg client.Config, d time.Duration, opts ...client.InvokeOption) error {
	t.Helper()
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return cl.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
		return err
	}, opts...)
}

func TestInvokeSaysWhereItWentAndThatNoNodeKnewALeader(t *testing.T) {
	noLeader := statusWith(t, codes.Unavailable, "cluster: not the leader, leader unknown", &api.NotLeader{})
	a, b := serveStatus(t, noLeader), serveStatus(t, noLeader)
	err := invokeStatus(t, []string{a, b})
	var ce *client.CallError
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrNoLeader) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want a *CallError wrapping ErrNoLeader (nodes answered: not ErrUnavailable)", err)
	}
	if !slices.Equal(ce.Tried, []string{a, b}) || !ce.NoLeader || status.Code(ce.Last) != codes.Unavailable {
		t.Errorf("CallError = %+v, want tried [%s %s], NoLeader, last Unavailable", ce, a, b)
	}
	if errors.Is(err, client.ErrIndeterminate) {
		t.Errorf("a read without Mutation is never indeterminate: %v", err)
	}
}

func TestInvokeMutationWithoutAnAnswerIsIndeterminateButARefusalIsNot(t *testing.T) {
	lost := serveStatus(t, status.Error(codes.Unavailable, "cluster: outcome unknown"))
	err := invokeStatus(t, []string{lost}, client.Mutation())
	var ce *client.CallError
	if !errors.Is(err, client.ErrIndeterminate) || !errors.As(err, &ce) || ce.NoLeader {
		t.Errorf("lost answer: err = %v (%+v), want ErrIndeterminate, no NoLeader", err, ce)
	}

	held, serr := status.New(codes.FailedPrecondition, "resource held").WithDetails(&api.ResourceHeld{
		Resource: "jobs/1", Holder: "a", Token: 3, TimeLeft: durationpb.New(time.Second)})
	if serr != nil {
		t.Fatal(serr)
	}
	err = invokeStatus(t, []string{serveStatus(t, held.Err())}, client.Mutation())
	var he *client.HeldError
	if errors.Is(err, client.ErrIndeterminate) || !errors.As(err, &he) || he.Holder != "a" || he.Token != 3 {
		t.Errorf("refusal: err = %v, want a *HeldError and a known outcome", err)
	}
}

// A tool that speaks the API itself (leasectl does) runs its calls through
// the client's call loop, and so gets its failover, retries and errors.
func ExampleClient_Invoke() {
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: []string{endpoint}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	var st *api.StatusResponse
	err = c.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		st, err = api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
		return err
	})
	var ce *client.CallError
	switch {
	case errors.As(err, &ce) && ce.NoLeader:
		fmt.Println("no leader; tried", ce.Tried)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(st.GetState(), len(st.GetMembers()), "member")
	}
	// Output: leader 1 member
}
