package transport

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RecoverInterceptors returns server interceptors that turn a panic in a
// handler (unary or streaming) into codes.Internal, logged at error with
// the method, the panic and its stack: no input from the network may bring
// the node down. Install them first in the chain so that they also cover
// the interceptors after them. A panic in a goroutine the handler started
// is not theirs to catch.
func RecoverInterceptors(log hclog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	recovered := func(method string, p any) error {
		log.Error("panic in handler", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "internal error in %s", method)
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = recovered(info.FullMethod, p)
			}
		}()
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = recovered(info.FullMethod, p)
			}
		}()
		return handler(srv, ss)
	}
	return unary, stream
}
