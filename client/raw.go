package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// This file is the low-level door into the client for tools that speak the
// API themselves (leasectl): one call loop, the one behind every method of
// Client, with its failover, leader hints, retries, credentials and error
// mapping, so that no tool carries a second copy of it.

// InvokeOption configures Invoke.
type InvokeOption func(*invokeOptions)

type invokeOptions struct {
	mutation  bool
	unbounded bool
}

// Mutation marks the call as one that changes state: when it fails with a
// retryable error after an attempt was made (no answer, the deadline or an
// interrupt), its outcome is unknown and Invoke's error also wraps
// ErrIndeterminate. Only a call that carries a request id is safe to retry
// after that.
func Mutation() InvokeOption { return func(o *invokeOptions) { o.mutation = true } }

// NoAttemptTimeout bounds each attempt by ctx alone instead of
// Config.RequestTimeout: for calls that wait (a queued Acquire) and for
// streams.
func NoAttemptTimeout() InvokeOption { return func(o *invokeOptions) { o.unbounded = true } }

// Invoke runs op through the client's call loop: op gets a connection to
// the current endpoint; a retryable failure (Unavailable, DeadlineExceeded,
// Aborted) moves to the leader the error names, or to the next endpoint,
// and runs op again after a jittered backoff, until op succeeds, fails for
// good, Config.RetryFor passes or ctx ends. op may therefore run several
// times (sequentially, never concurrently): it must be safe to repeat, for
// instance by reusing one request id (NewRequestID).
//
// Errors are those of Client's methods: *HeldError, *InvalidError,
// ErrNotFound, ErrUnavailable at the end of the retries, ErrIndeterminate
// with Mutation, or the service's status error for codes without a client
// meaning. Once an attempt has been made the error is a *CallError, which
// says where the call went and what the nodes answered; it unwraps to the
// error above.
func (c *Client) Invoke(ctx context.Context, op func(ctx context.Context, conn *grpc.ClientConn) error, opts ...InvokeOption) error {
	var o invokeOptions
	for _, f := range opts {
		f(&o)
	}
	ce := &CallError{}
	// do runs op sequentially, so ce needs no lock.
	err := c.do(ctx, callSpec{wait: o.unbounded, changes: o.mutation}, func(ctx context.Context, conn *grpc.ClientConn) error {
		if addr := conn.Target(); !slices.Contains(ce.Tried, addr) {
			ce.Tried = append(ce.Tried, addr)
		}
		err := op(ctx, conn)
		if err != nil {
			ce.Last = err
			if answeredNoLeader(err) {
				ce.NoLeader = true
			}
		}
		return err
	})
	if err == nil {
		return nil
	}
	if len(ce.Tried) == 0 {
		return err // nothing was attempted (closed client, bad address)
	}
	if o.mutation && outcomeUnknown(err) && !errors.Is(err, ErrIndeterminate) {
		err = fmt.Errorf("%w: %w", ErrIndeterminate, err)
	}
	ce.Err = err
	return ce
}

// CallError is the error of an Invoke that made at least one attempt.
type CallError struct {
	// Err is the call's error (see Invoke); CallError unwraps to it.
	Err error
	// Tried lists the endpoints attempted, in the order first tried.
	Tried []string
	// Last is the last attempt's own error, as gRPC returned it (a status
	// error, with the service's details), before any mapping.
	Last error
	// NoLeader is set when a node answered that it knew no leader (an
	// election under way, or no quorum): the cluster was reached, not
	// writable.
	NoLeader bool
}

func (e *CallError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *CallError) Unwrap() error { return e.Err }

// NewRequestID returns a fresh request id (16 random bytes in hex), the
// form Acquire uses when WithRequestID is not given.
func NewRequestID() string { return newRequestID() }

// answeredNoLeader reports whether err is a node's answer that it knows no
// leader: Unavailable with an api.NotLeader detail that names none.
func answeredNoLeader(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if nl, ok := d.(*api.NotLeader); ok && nl.GetLeaderAddr() == "" {
			return true
		}
	}
	return false
}

// outcomeUnknown reports whether a failed call may still have taken
// effect: no definite answer came back.
func outcomeUnknown(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false // a mapped answer of the service (*HeldError...)
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}
