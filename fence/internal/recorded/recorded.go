// Package recorded runs a server handler under a fence.Guard so that the
// token is recorded whenever the handler ran: the one rule shared by the
// fencehttp middleware and the fencegrpc interceptors.
package recorded

import (
	"context"

	"github.com/leasefence/leasefence/fence"
)

// Run runs handler inside g.Do for tok, only if g admits tok, and has g
// record tok whenever handler ran, whether it returned or panicked: a
// middleware cannot tell whether its handler applied an effect before it
// failed or panicked, and an effect under an unrecorded token would let an
// older holder in after it. A guard records only when its effect returns
// nil, so Run catches handler's panic inside g.Do, lets g.Do record, and
// panics again with the same value once g.Do has returned (the record done,
// or failed), so that the server's own recovery (net/http, a gRPC recovery
// interceptor) sees it unchanged, http.ErrAbortHandler included. The
// re-raised panic's stack starts at Run, not at the handler's panic.
//
// ran reports whether handler ran; err is g.Do's error: a refusal or a
// context error when handler did not run, a failed record when it did.
func Run(ctx context.Context, g fence.Guard, tok fence.Token, handler func(context.Context)) (ran bool, err error) {
	var (
		p        any
		panicked bool
	)
	err = g.Do(ctx, tok, func(ctx context.Context) error {
		ran = true
		p, panicked = catch(func() { handler(ctx) })
		return nil // recorded whatever handler did
	})
	if panicked {
		panic(p)
	}
	return ran, err
}

// catch calls f and returns the value it panicked with and true, or nil
// and false if it returned. runtime.Goexit is not a panic and goes on
// unwinding.
func catch(f func()) (p any, panicked bool) {
	panicked = true
	defer func() {
		if panicked {
			p = recover()
		}
	}()
	f()
	return nil, false
}
