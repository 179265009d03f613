package demo

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
)

// leader polls the nodes until one reports itself leader, and returns its
// id.
func leader(ctx context.Context, endpoints []string) (string, error) {
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, e := range endpoints {
		c, err := grpc.NewClient(e, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return "", err
		}
		conns = append(conns, c)
	}
	for ctx.Err() == nil {
		for _, c := range conns {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := api.NewClusterServiceClient(c).Status(sctx, &api.StatusRequest{})
			cancel()
			if err == nil && st.GetState() == "leader" {
				return st.GetId(), nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("no leader: %w", ctx.Err())
}
