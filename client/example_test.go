package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasefence/leasefence/client"
)

// endpoint is the address of a one-node cluster the examples run against
// (started in TestMain); in production, list three or more nodes.
var endpoint string

// A worker holds a lease while it acts, passes the fencing token with every
// effect, and stops when the lease's context ends.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, err := client.Dial(ctx, endpoint)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	lease, err := c.Acquire(ctx, "jobs/42", client.WithTTL(10*time.Second), client.WithHolder("worker-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	work := lease.Context() // ends at the lease's safe deadline at the latest
	fmt.Println("token", lease.Token(), "live", work.Err() == nil)

	// A second acquire is refused while the lease is held.
	_, err = c.Acquire(ctx, "jobs/42", client.WithHolder("worker-b"))
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by", held.Holder, "token", held.Token)
	}

	_ = lease.Release(ctx)
	<-lease.Done()
	fmt.Println("ended:", lease.Err())
	// Output:
	// token 1 live true
	// held by worker-a token 1
	// ended: client: lease released
}

// Watch reports every grant, renewal, release and expiry, resuming on
// another node after a failure without gaps.
func ExampleClient_Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.Dial(ctx, endpoint)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	events := c.Watch(ctx, "watched/", client.WithPrefix())
	l, err := c.Acquire(ctx, "watched/a", client.WithTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = l.Release(ctx)
	for i := 0; i < 2; i++ {
		ev := <-events
		fmt.Println(ev.Type, ev.Resource, "token", ev.Token)
	}
	// Output:
	// granted watched/a token 1
	// released watched/a token 1
}
