package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasefence/leasefence/fence"
)

// The seeds' story on an in-process guard: A holds token 71 and pauses, B
// gets 72 and writes, A's late write is refused.
func ExampleMemory() {
	guard := fence.NewMemory(fence.AtLeast)
	ctx := context.Background()
	write := func(tok uint64, who string) error {
		return guard.Do(ctx, fence.Token{Scope: "jobs/42", Value: tok}, func(context.Context) error {
			fmt.Println(who, "wrote")
			return nil
		})
	}
	_ = write(72, "B")
	err := write(71, "A")
	fmt.Println(errors.Is(err, fence.ErrStaleToken), err)
	// Output:
	// B wrote
	// true fence: stale token: scope "jobs/42" presented 71, highest accepted 72
}

func ExampleParseHeader() {
	tok, err := fence.ParseHeader("jobs/42=72")
	fmt.Println(tok.Scope, tok.Value, err)
	_, err = fence.ParseHeader("jobs/42=0")
	fmt.Println(errors.Is(err, fence.ErrMalformedToken))
	// Output:
	// jobs/42 72 <nil>
	// true
}
