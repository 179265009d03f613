package transport

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// panicking is a service whose unary and streaming methods panic.
var panickingDesc = grpc.ServiceDesc{
	ServiceName: "test.Panicking",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { panic("unary boom") }
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Panicking/Unary"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		Handler:       func(any, grpc.ServerStream) error { panic("stream boom") },
	}},
}

// lines hands each log line to the test as it is written.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// A handler that panics answers Internal and is logged with its method;
// the server goes on serving.
func TestRecoverInterceptorsTurnAPanicIntoInternal(t *testing.T) {
	logs := make(lines, 16)
	u, s := RecoverInterceptors(hclog.New(&hclog.LoggerOptions{Output: logs}))
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s))
	srv.RegisterService(&panickingDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ { // the second call shows the server survived the first
		err = conn.Invoke(ctx, "/test.Panicking/Unary", &emptypb.Empty{}, &emptypb.Empty{})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "internal error in /test.Panicking/Unary") {
			t.Fatalf("unary call %d: %v, want Internal", i, err)
		}
	}
	st, err := conn.NewStream(ctx, &panickingDesc.Streams[0], "/test.Panicking/Stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(&emptypb.Empty{}); status.Code(err) != codes.Internal {
		t.Fatalf("stream: %v, want Internal", err)
	}
	var out string
	for len(logs) > 0 {
		out += <-logs
	}
	for _, want := range []string{"panic in handler", "unary boom", "stream boom", "/test.Panicking/Stream"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}
