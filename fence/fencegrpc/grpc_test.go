package fencegrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencegrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failing answers every Check with an error, to show a failed handler
// leaves its token unrecorded.
type failing struct {
	healthpb.UnimplementedHealthServer
}

func (failing) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Internal, "boom")
}

// serve runs the health service behind the fencing interceptor on a real
// loopback socket and returns a client connection without interceptors.
func serve(t *testing.T, svc healthpb.HealthServer, opts ...fencegrpc.Option) *grpc.ClientConn {
	t.Helper()
	return serveWith(t, svc, grpc.UnaryInterceptor(fencegrpc.UnaryServerInterceptor(opts...)))
}

// serveWith is serve with the server's interceptors chosen by the caller.
func serveWith(t *testing.T, svc healthpb.HealthServer, srvOpts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(srvOpts...)
	healthpb.RegisterHealthServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func reason(err error) (codes.Code, string, map[string]string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason(), info.GetMetadata()
		}
	}
	return st.Code(), "", nil
}

func TestServerInterceptorGivesEachCaseItsStatus(t *testing.T) {
	guard := fence.NewMemory(fence.AtLeast)
	conn := serve(t, health.NewServer(), fencegrpc.WithGuard(guard))
	hc := healthpb.NewHealthClient(conn)
	call := func(kv ...string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := call("fencing-scope", "jobs/42", "fencing-token", "72"); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	if h := guard.Highest("jobs/42"); h != 72 {
		t.Fatalf("highest = %d after a fresh call, want 72", h)
	}
	cases := []struct {
		name   string
		md     []string
		code   codes.Code
		reason string
	}{
		{"missing", nil, codes.InvalidArgument, fencegrpc.ReasonMissingToken},
		{"scope only", []string{"fencing-scope", "jobs/42"}, codes.InvalidArgument, fencegrpc.ReasonMalformedToken},
		{"token only", []string{"fencing-token", "72"}, codes.InvalidArgument, fencegrpc.ReasonMalformedToken},
		{"not a number", []string{"fencing-scope", "jobs/42", "fencing-token", "seventy"}, codes.InvalidArgument, fencegrpc.ReasonMalformedToken},
		{"zero", []string{"fencing-scope", "jobs/42", "fencing-token", "0"}, codes.InvalidArgument, fencegrpc.ReasonMalformedToken},
		{"two tokens", []string{"fencing-scope", "jobs/42", "fencing-token", "72", "fencing-token", "73"}, codes.InvalidArgument, fencegrpc.ReasonMalformedToken},
		{"stale", []string{"fencing-scope", "jobs/42", "fencing-token", "71"}, codes.FailedPrecondition, fencegrpc.ReasonStaleToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, r, md := reason(call(c.md...))
			if code != c.code || r != c.reason {
				t.Fatalf("got %v/%s, want %v/%s", code, r, c.code, c.reason)
			}
			if c.reason == fencegrpc.ReasonStaleToken && (md["scope"] != "jobs/42" || md["presented"] != "71" || md["highest"] != "72") {
				t.Fatalf("stale metadata %v", md)
			}
		})
	}
	if h := guard.Highest("jobs/42"); h != 72 {
		t.Fatalf("highest = %d after refusals, want 72", h)
	}
}

func TestClientInterceptorSendsTokenAndTypesTheRefusal(t *testing.T) {
	guard := fence.NewMemory(fence.Strict)
	conn := serve(t, health.NewServer(), fencegrpc.WithGuard(guard))
	cc, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(fencegrpc.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	lease := fakeLease{scope: "shard 7/ü", token: 9}
	ctx := fence.NewContext(context.Background(), fence.TokenOf(lease))
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}) // strict: the same token again is stale
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || *st != (fence.StaleTokenError{Scope: "shard 7/ü", Presented: 9, Highest: 9}) {
		t.Fatalf("second call: %v, want a StaleTokenError for 9/9", err)
	}
	if !errors.Is(err, fence.ErrStaleToken) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("error %v: Is stale %v, code %v", err, errors.Is(err, fence.ErrStaleToken), status.Code(err))
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); !errors.Is(err, fence.ErrNoToken) || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("call without a token: %v", err)
	}
}

type fakeLease struct {
	scope string
	token uint64
}

func (l fakeLease) Scope() string { return l.scope }
func (l fakeLease) Token() uint64 { return l.token }

// A handler that fails may have applied its effect: its token is recorded
// anyway, so an older one is refused afterwards.
func TestTokenIsRecordedWhenTheHandlerRanWhateverItReturned(t *testing.T) {
	guard := fence.NewMemory(fence.AtLeast)
	hc := healthpb.NewHealthClient(serve(t, failing{}, fencegrpc.WithGuard(guard)))
	ctx := fencegrpc.AppendToOutgoing(context.Background(), fence.Token{Scope: "s", Value: 5})
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Internal {
		t.Fatalf("error = %v, want the handler's Internal", err)
	}
	if h := guard.Highest("s"); h != 5 {
		t.Fatalf("highest = %d after a handler that ran and failed, want 5", h)
	}
	old := fencegrpc.AppendToOutgoing(context.Background(), fence.Token{Scope: "s", Value: 4})
	if _, err := hc.Check(old, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("older token after a failed handler: %v, want FailedPrecondition", err)
	}
}

// panicking applies its effect (appends the call's token) in Check and
// Watch, then panics for token 72, as a handler whose reply fails after
// the effect may.
type panicking struct {
	healthpb.UnimplementedHealthServer
	mu      sync.Mutex
	effects []uint64
}

func (p *panicking) effect(ctx context.Context) {
	tok, _ := fence.FromContext(ctx)
	p.mu.Lock()
	p.effects = append(p.effects, tok.Value)
	p.mu.Unlock()
	if tok.Value == 72 {
		panic("effect applied, then the reply failed")
	}
}

func (p *panicking) applied() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.effects)
}

func (p *panicking) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	p.effect(ctx)
	return &healthpb.HealthCheckResponse{}, nil
}

func (p *panicking) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	p.effect(ss.Context())
	return nil
}

// Recovery interceptors, as a server puts outside the fencing ones: a
// panic becomes Internal and the server keeps serving.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(srv, ss)
}

// A handler that panics after its effect, behind a recovery interceptor,
// has its token recorded all the same: 70 ok, 72 applies and panics, then
// 71 is refused and never acts. Unary and stream alike.
func TestTokenIsRecordedWhenTheHandlerPanicsAfterItsEffect(t *testing.T) {
	calls := []struct {
		name string
		call func(hc healthpb.HealthClient, ctx context.Context) error
	}{
		{"unary", func(hc healthpb.HealthClient, ctx context.Context) error {
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}},
		{"stream", func(hc healthpb.HealthClient, ctx context.Context) error {
			ws, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := ws.Recv(); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			guard := fence.NewMemory(fence.AtLeast)
			svc := &panicking{}
			hc := healthpb.NewHealthClient(serveWith(t, svc,
				grpc.ChainUnaryInterceptor(recoverUnary, fencegrpc.UnaryServerInterceptor(fencegrpc.WithGuard(guard))),
				grpc.ChainStreamInterceptor(recoverStream, fencegrpc.StreamServerInterceptor(fencegrpc.WithGuard(guard)))))
			send := func(v uint64) error {
				return c.call(hc, fencegrpc.AppendToOutgoing(context.Background(), fence.Token{Scope: "s", Value: v}))
			}
			if err := send(70); err != nil {
				t.Fatalf("70: %v", err)
			}
			if err := send(72); status.Code(err) != codes.Internal {
				t.Fatalf("72: %v, want the recovered panic's Internal", err)
			}
			code, r, _ := reason(send(71))
			if code != codes.FailedPrecondition || r != fencegrpc.ReasonStaleToken {
				t.Fatalf("71 after 72's effect: %v/%s, want FailedPrecondition/%s", code, r, fencegrpc.ReasonStaleToken)
			}
			if got := svc.applied(); slices.Contains(got, 71) {
				t.Fatalf("effects %v: 71 acted after 72", got)
			}
		})
	}
}

func TestUnfencedMethodsPassWithoutToken(t *testing.T) {
	hc := healthpb.NewHealthClient(serve(t, health.NewServer(),
		fencegrpc.ForMethods(func(m string) bool { return m != "/grpc.health.v1.Health/Check" })))
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("unfenced method: %v", err)
	}
}

// Without a guard the interceptor only requires the token and hands it to
// the handler, which may refuse it itself; its fence error is mapped too.
type selfFenced struct {
	healthpb.UnimplementedHealthServer
	g *fence.Memory
}

func (s selfFenced) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	tok, ok := fence.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no token in context")
	}
	return &healthpb.HealthCheckResponse{}, s.g.Do(ctx, tok, func(context.Context) error { return nil })
}

func TestHandlerFenceErrorsAreMapped(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	hc := healthpb.NewHealthClient(serve(t, selfFenced{g: g}))
	ok := fencegrpc.AppendToOutgoing(context.Background(), fence.Token{Scope: "s", Value: 3})
	if _, err := hc.Check(ok, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	stale := fencegrpc.AppendToOutgoing(context.Background(), fence.Token{Scope: "s", Value: 2})
	_, err := hc.Check(stale, &healthpb.HealthCheckRequest{})
	if code, r, _ := reason(err); code != codes.FailedPrecondition || r != fencegrpc.ReasonStaleToken {
		t.Fatalf("handler's stale error came out as %v/%s", code, r)
	}
	if st, ok := fence.IsStale(fencegrpc.FromStatus(err)); !ok || st.Highest != 3 {
		t.Fatalf("FromStatus(%v) = %v", err, st)
	}
}
