package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
)

// Embedding: start a node inside the application and call it without a
// network hop. A one-node cluster is shown; production runs three or more.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "leasefence-example-")
	defer os.RemoveAll(dir)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()

	cfg := cluster.DefaultConfig()
	cfg.ID = "n1"
	cfg.Insecure = true // plaintext on loopback, for this example only
	cfg.Listen = addr
	cfg.DataDir = dir
	cfg.Bootstrap = map[string]string{"n1": addr}
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.Start(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	for !node.IsLeader() {
		time.Sleep(10 * time.Millisecond)
	}

	leases := node.LeaseServer()
	ctx := context.Background()
	r, err := leases.Acquire(ctx, &api.AcquireRequest{Resource: "jobs/42", Holder: "me", Ttl: durationpb.New(10 * time.Second)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token", r.Lease.Token)
	_, _ = leases.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id})
	r, _ = leases.Acquire(ctx, &api.AcquireRequest{Resource: "jobs/42", Holder: "me", Ttl: durationpb.New(10 * time.Second)})
	fmt.Println("token", r.Lease.Token)
	// Output:
	// token 1
	// token 2
}
