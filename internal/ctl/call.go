package ctl

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasefence/leasefence/client"
)

// connectTimeout bounds one connection attempt, so that a node that drops
// packets or is frozen (rather than refusing the connection) costs at most
// this much before the next endpoint is tried.
const connectTimeout = 2 * time.Second

// newClient returns the client every call of this invocation goes through:
// the endpoints, TLS and bearer token of the global flags. Failover, leader
// hints, retries and the mapping of errors are the client's (client.Invoke);
// leasectl has no call loop of its own.
func (a *app) newClient() (*client.Client, error) {
	bo := backoff.DefaultConfig
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = 2 * time.Second
	return client.New(client.Config{
		Endpoints: a.endpoints,
		TLS:       a.tlsConfig,
		Token:     a.token,
		RetryFor:  a.retryFor,
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: a.connectTimeout}),
		},
	})
}

// rpc runs one unary method of the API (a method expression such as
// api.LeaseServiceClient.Renew, with the constructor of its service's
// client) through the client's call loop, and returns the answer and the
// address of the node that gave it.
func rpc[C, Req, Resp any](ctx context.Context, a *app, newC func(grpc.ClientConnInterface) C,
	method func(C, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, opts ...client.InvokeOption,
) (Resp, string, error) {
	var (
		resp Resp
		addr string
	)
	err := a.cl.Invoke(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		r, err := method(newC(conn), ctx, req)
		resp, addr = r, conn.Target()
		return err
	}, opts...)
	return resp, addr, err
}
