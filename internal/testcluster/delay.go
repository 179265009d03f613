package testcluster

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// DelayReply is a client interceptor that holds back, for d, the answer
// to each successful unary call whose method (full name,
// "/leasefence.v1.LeaseService/Renew") when accepts, as a slow network or
// a paused client would: the node acted on time, the client learns of it
// late. The wait ends early when the call's context does.
func DelayReply(d time.Duration, when func(method string) bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, m, req, reply, cc, opts...)
		if err == nil && when(m) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		return err
	}
}
