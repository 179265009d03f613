package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/client/election"
)

// endpoint is a one-node cluster started in TestMain.
var endpoint string

// Run leads while it can and campaigns again after a loss. The callback's
// context ends when leadership is lost; the token fences the leader's
// effects.
func ExampleElection_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.Dial(ctx, endpoint)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	e := election.New(c, "leader/scheduler", "scheduler-1", election.WithTTL(5*time.Second))
	done := make(chan struct{})
	go func() {
		_ = e.Run(ctx, election.Callbacks{
			OnStartedLeading: func(lctx context.Context, token uint64) {
				fmt.Println("leading with token", token)
				cancel() // step down at once, for the example
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
		})
		close(done)
	}()
	<-done
	// Output:
	// leading with token 1
	// stopped leading
}
