package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// callsServer serves the health service on loopback, through a CallServer
// that runs ic around every call, or (calls false) only as plain unary
// calls, as a node of an older version would; opts go to the server.
func callsServer(t *testing.T, calls bool, ic grpc.UnaryServerInterceptor, opts ...grpc.ServerOption) (addr string, srv *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	if calls {
		cs := NewCallServer(ic)
		cs.Add(&healthpb.Health_ServiceDesc, hs)
		cs.Register(srv)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

func callConn(t *testing.T, addr string) *CallConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := NewCallConn(cc)
	t.Cleanup(func() { c.Close(); cc.Close() })
	return c
}

func TestBatchedCallsAnswerAsUnaryCallsDo(t *testing.T) {
	type seen struct {
		method   string
		md       metadata.MD
		deadline time.Duration
	}
	got := make(chan seen, 1)
	ic := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		d, _ := ctx.Deadline()
		got <- seen{info.FullMethod, md, time.Until(d)}
		if req.(*healthpb.HealthCheckRequest).Service == "detailed" {
			st, _ := status.New(codes.FailedPrecondition, "with details").WithDetails(&errdetails.ErrorInfo{Reason: "WHY"})
			return nil, st.Err()
		}
		return h(ctx, req)
	}
	addr, _ := callsServer(t, true, ic)
	client := healthpb.NewHealthClient(callConn(t, addr))

	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "who", "me"), 5*time.Second)
	defer cancel()
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "up"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check(up) = %v, %v; want SERVING", resp, err)
	}
	s := <-got
	if s.method != healthpb.Health_Check_FullMethodName || s.md.Get("who")[0] != "me" || s.deadline <= 0 || s.deadline > 5*time.Second {
		t.Errorf("the handler saw method %q, metadata %v, deadline in %v; want the caller's", s.method, s.md, s.deadline)
	}

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"})
	<-got
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check(unknown) = %v; want NotFound as the handler answers", err)
	}
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "detailed"})
	<-got
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 || st.Details()[0].(*errdetails.ErrorInfo).Reason != "WHY" {
		t.Errorf("Check(detailed) = %v with details %v; want FailedPrecondition with its ErrorInfo", err, st.Details())
	}
}

func TestCallsQueuedTogetherLeaveInOneMessage(t *testing.T) {
	addr, _ := callsServer(t, true, nil)
	c := callConn(t, addr)
	st, err := c.stream()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "up"})
	calls := make([]*transportpb.Call, 100)
	for i := range calls {
		calls[i] = &transportpb.Call{Method: healthpb.Health_Check_FullMethodName, Request: body}
	}
	for i, w := range st.submit(calls...) {
		var resp healthpb.HealthCheckResponse
		o := <-w
		if o.err != nil {
			t.Fatalf("call %d: %v", i, o.err)
		}
		if err := decodeAnswer(o.answer, &resp); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("call %d: %v, %v", i, &resp, err)
		}
	}
	if n, m := c.Stats(); n != 100 || m != 1 {
		t.Errorf("100 calls queued together left as %d calls in %d messages; want 100 in 1", n, m)
	}
}

func TestManyCallersShareTheStream(t *testing.T) {
	addr, _ := callsServer(t, true, nil)
	c := callConn(t, addr)
	client := healthpb.NewHealthClient(c)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for range 20 {
				if _, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "up"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls, messages := c.Stats()
	t.Logf("%d calls in %d messages", calls, messages)
	if calls != 64*20 {
		t.Errorf("%d calls went through the stream; want %d", calls, 64*20)
	}
}

// The calls of one message run together: two that each wait for the
// other both finish (run one after the other, the first would wait alone).
func TestServerRunsTheCallsOfAMessageTogether(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	ic := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		arrived.Done()
		select {
		case <-both:
			return h(ctx, req)
		case <-time.After(10 * time.Second):
			return nil, status.Error(codes.DeadlineExceeded, "the other call of the message never ran beside this one")
		}
	}
	addr, _ := callsServer(t, true, ic)
	st, err := callConn(t, addr).stream()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "up"})
	calls := []*transportpb.Call{
		{Method: healthpb.Health_Check_FullMethodName, Request: body},
		{Method: healthpb.Health_Check_FullMethodName, Request: body},
	}
	for i, w := range st.submit(calls...) {
		o := <-w
		if o.err == nil {
			o.err = decodeAnswer(o.answer, &healthpb.HealthCheckResponse{})
		}
		if o.err != nil {
			t.Errorf("call %d: %v", i, o.err)
		}
	}
}

func TestUnknownMethodIsUnimplementedAndTheStreamLives(t *testing.T) {
	addr, _ := callsServer(t, true, nil)
	c := callConn(t, addr)
	var resp healthpb.HealthCheckResponse
	err := c.Invoke(t.Context(), "/no.Such/Method", &healthpb.HealthCheckRequest{}, &resp)
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v; want Unimplemented", err)
	}
	if _, err := healthpb.NewHealthClient(c).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "up"}); err != nil {
		t.Errorf("a call after the refused one: %v", err)
	}
}

func TestOlderPeerGetsUnaryCalls(t *testing.T) {
	addr, _ := callsServer(t, false, nil)
	c := callConn(t, addr)
	client := healthpb.NewHealthClient(c)
	for i := range 3 {
		resp, err := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "up"})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("call %d to a node without Calls: %v, %v; want it sent as a unary call", i, resp, err)
		}
	}
	if !c.unary.Load() {
		t.Error("the CallConn did not switch to unary calls")
	}
}

func TestBrokenStreamFailsItsCallsUnavailableAndTheNextOpensAnother(t *testing.T) {
	entered := make(chan struct{}, 1)
	ic := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	addr, srv := callsServer(t, true, ic)
	c := callConn(t, addr)
	errc := make(chan error, 1)
	go func() {
		_, err := healthpb.NewHealthClient(c).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "up"})
		errc <- err
	}()
	<-entered
	srv.Stop()
	select {
	case err := <-errc:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("call on a broken stream: %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call on a broken stream still waits")
	}
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	if st != nil {
		t.Error("the broken stream is still the CallConn's: the next call would fail on it")
	}
}

// A handler that ends with its context's error is answered with that
// error's code, as gRPC's own server answers it, not Unknown: the
// caller's deadline often ends the handler a moment before the caller's
// own timer fires, and TestCallerDeadlineEndsTheWait failed so under load.
func TestAHandlersContextErrorKeepsItsCode(t *testing.T) {
	for _, want := range []error{context.DeadlineExceeded, context.Canceled} {
		ic := func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, fmt.Errorf("handler: %w", want)
		}
		addr, _ := callsServer(t, true, ic)
		c := callConn(t, addr)
		_, err := healthpb.NewHealthClient(c).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "up"})
		if got := status.Code(err); got != status.FromContextError(want).Code() {
			t.Errorf("a handler ending with %v: %v (%v), want %v", want, got, err, status.FromContextError(want).Code())
		}
	}
}

func TestCallerDeadlineEndsTheWait(t *testing.T) {
	ic := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	addr, _ := callsServer(t, true, ic)
	c := callConn(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{Service: "up"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v; want DeadlineExceeded", err)
	}
}

// Whatever a peer sends in a Call, the server answers it with its id and
// either a response or a status, and never panics: an unknown method is
// Unimplemented, an undecodable request InvalidArgument.
func FuzzCallServerAnswersAnyCall(f *testing.F) {
	up, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "up"})
	f.Add(healthpb.Health_Check_FullMethodName, up, int64(0), "k", "v")
	f.Add(healthpb.Health_Check_FullMethodName, []byte{0xff, 0xff, 0x01}, int64(-5), ":authority", "x")
	f.Add("/no.Such/Method", []byte{}, int64(1), "", "")
	f.Add("", []byte{0x0a, 0x80}, int64(1<<62), "K\x00", "\xff")
	hs := health.NewServer()
	s := NewCallServer(nil)
	s.Add(&healthpb.Health_ServiceDesc, hs)
	f.Fuzz(func(t *testing.T, method string, request []byte, timeout int64, key, value string) {
		a := s.run(t.Context(), &transportpb.Call{Id: 7, Method: method, Request: request, TimeoutNs: timeout,
			Metadata: []*transportpb.Metadata{{Key: key, Value: value}}})
		if a.Id != 7 {
			t.Fatalf("answer id %d; want 7", a.Id)
		}
		var resp healthpb.HealthCheckResponse
		err := decodeAnswer(a, &resp)
		if (len(a.Status) == 0) != (err == nil) {
			t.Fatalf("status %x but decode error %v", a.Status, err)
		}
	})
}
