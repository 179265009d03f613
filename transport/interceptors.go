package transport

import (
	"context"

	"google.golang.org/grpc"
)

// WithInterceptors returns a copy of desc whose handlers run unary (for
// its methods) and stream (for its streams) around the service's own
// code, inside whatever interceptors the serving gRPC server has: they
// hold for the service on any server it is registered on, whatever that
// server's options. A unary request is decoded before unary runs (as for
// a server interceptor); a stream's messages are read by the handler,
// after stream.
func WithInterceptors(desc *grpc.ServiceDesc, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, outer grpc.UnaryServerInterceptor) (any, error) {
			if outer == nil {
				return h(srv, ctx, dec, unary)
			}
			return h(srv, ctx, dec, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					return unary(ctx, req, info, handler)
				})
			})
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		h := sd.Handler
		info := &grpc.StreamServerInfo{FullMethod: "/" + desc.ServiceName + "/" + sd.StreamName, IsClientStream: sd.ClientStreams, IsServerStream: sd.ServerStreams}
		sd.Handler = func(srv any, ss grpc.ServerStream) error { return stream(srv, ss, info, h) }
		out.Streams[i] = sd
	}
	return &out
}
