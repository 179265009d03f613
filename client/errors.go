package client

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// Errors returned by the client. Test with errors.Is; the typed errors
// below carry details and unwrap to these.
var (
	// ErrHeld: Acquire found the resource held (a *HeldError says by whom).
	ErrHeld = errors.New("client: resource held")
	// ErrInvalidArgument: the service refused a field (an *InvalidError
	// says which).
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrNotFound: the lease is unknown or already expired.
	ErrNotFound = errors.New("client: lease not found or expired")
	// ErrLeaseLost ends a lease whose renewal the service refused: it
	// expired or was released elsewhere. Acquire again for a new token.
	// Acquire returns it too (with ErrNotFound) when its request id
	// replays a grant that has since ended, and for a waiting Acquire
	// whose grant it could not confirm with a renewal (refused or
	// unanswered; the grant is released, best effort), and when another
	// Acquire of the same request id in this client gave the grant up
	// and releases it.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrSafeDeadline ends a lease whose safe deadline passed without a
	// confirmed renewal. The cluster may still count it as held for a
	// while; this process must act as if it were not. Acquire returns it
	// (wrapped, with no lease) when the grant, or the renewal a waiting
	// Acquire confirms it with, was answered after the safe window it
	// opened had already closed; that lease is released (best effort: the
	// error says when the release failed and the lease ends with its ttl).
	ErrSafeDeadline = errors.New("client: safe deadline passed without a confirmed renewal")
	// ErrReleased ends a lease released through this client.
	ErrReleased = errors.New("client: lease released")
	// ErrClosed: the client was closed (it also ends every lease). A call
	// that may have taken effect when Close cut it is an
	// *IndeterminateError (ErrIndeterminate), wrapping ErrClosed when Close
	// came between its attempts.
	ErrClosed = errors.New("client: closed")
	// ErrTLSConfig: LoadTLS got a half configuration (a certificate
	// without its key or the reverse, a certificate without a CA) or a file
	// it could not load. The wrapping error says which.
	ErrTLSConfig = errors.New("client: tls config")
	// ErrUnavailable: no node answered within the caller's deadline or
	// RetryFor: each refused the connection, broke it, or stayed silent.
	// Nothing the call asked for was done (a call that changes state and
	// may have reached a node fails with ErrIndeterminate instead).
	ErrUnavailable = errors.New("client: cluster unreachable")
	// ErrNoLeader: nodes answered, but none could serve the call within the
	// caller's deadline or RetryFor: no leader was elected (no quorum is
	// up or connected), or the leader they named could not be reached.
	// Nothing the call asked for was done.
	ErrNoLeader = errors.New("client: no leader")
	// ErrIndeterminate: a call that changes state may have reached the
	// leader, and no answer says whether it took effect (the node went
	// silent, the connection broke after sending, the caller's context
	// was canceled while an attempt was out, a node failed with Internal
	// or Unknown, or a node answered that the outcome is unknown). An
	// Acquire's *IndeterminateError carries its request id: it is safe to
	// retry with it (WithRequestID), and yields the same lease if the first
	// attempt was granted. A Release's has none: Release is idempotent,
	// calling it again is the retry.
	ErrIndeterminate = errors.New("client: outcome unknown")
	// ErrOverloaded: the leader refused the call for want of admission
	// budget (ResourceExhausted, reason OVERLOADED) on every attempt
	// within the caller's deadline or RetryFor, each time after waiting as
	// long as it asked. Nothing was done. Renewals of held leases are
	// preferred over new grants, so Acquire meets it first.
	ErrOverloaded = errors.New("client: cluster overloaded")
)

// IndeterminateError says that the outcome of a call is unknown and which
// request id retries it safely.
type IndeterminateError struct {
	// RequestID to retry with ("" when the call carried none).
	RequestID string
	// Err says what was seen; it wraps the caller's context error when the
	// deadline ended the call (a waiting Acquire that timed out).
	Err error
}

func (e *IndeterminateError) Error() string {
	if e.RequestID == "" {
		return fmt.Sprintf("%v: %v", ErrIndeterminate, e.Err)
	}
	return fmt.Sprintf("%v (retry with request id %q): %v", ErrIndeterminate, e.RequestID, e.Err)
}

// Unwrap makes errors.Is(err, ErrIndeterminate) true, and exposes Err.
func (e *IndeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.Err} }

// HeldError describes the lease that refused an Acquire.
type HeldError struct {
	Resource string
	Holder   string
	Token    uint64
	// TimeLeft until the resource may be granted again, as the service
	// measured it.
	TimeLeft time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("client: %q held by %q (token %d), free in %v", e.Resource, e.Holder, e.Token, e.TimeLeft)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// InvalidError says which argument the service refused.
type InvalidError struct {
	Field, Limit, Message string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return "client: invalid argument: " + e.Message
	}
	return fmt.Sprintf("client: invalid %s: %s", e.Field, e.Limit)
}

// Unwrap makes errors.Is(err, ErrInvalidArgument) true.
func (e *InvalidError) Unwrap() error { return ErrInvalidArgument }

// fromStatus is the inverse of the server's table (cluster/errors.go):
// gRPC statuses back to client errors. Codes without a client meaning are
// returned as the status error itself.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if h, ok := d.(*api.ResourceHeld); ok {
				return &HeldError{Resource: h.Resource, Holder: h.Holder, Token: h.Token, TimeLeft: h.TimeLeft.AsDuration()}
			}
		}
	case codes.InvalidArgument:
		ie := &InvalidError{Message: st.Message()}
		for _, d := range st.Details() {
			if b, ok := d.(*api.BadField); ok {
				ie.Field, ie.Limit = b.Field, b.Limit
			}
		}
		return ie
	case codes.NotFound:
		for _, d := range st.Details() {
			if e, ok := d.(*errdetails.ErrorInfo); ok && e.Reason == api.ReasonLeaseEnded {
				// A retry replayed a grant that has ended: nothing is held.
				return fmt.Errorf("%w: %w: %s", ErrLeaseLost, ErrNotFound, st.Message())
			}
		}
		return fmt.Errorf("%w: %s", ErrNotFound, st.Message())
	case codes.ResourceExhausted:
		if _, ok := overloadHint(err); ok {
			return fmt.Errorf("%w: %s", ErrOverloaded, st.Message())
		}
	}
	return err
}

// overloadHint reports whether err is a leader's refusal for overload
// (ResourceExhausted with an OVERLOADED ErrorInfo: nothing was proposed)
// and how long it asked the caller to wait (its RetryInfo; 0 if none).
func overloadHint(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	var (
		wait time.Duration
		over bool
	)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			wait = d.RetryDelay.AsDuration()
		case *errdetails.ErrorInfo:
			over = over || (d.Domain == api.ErrorDomain && d.Reason == api.ReasonOverloaded)
		}
	}
	return wait, over
}

// overloadWait is how long to wait after an overload refusal that asked
// for hint: at least hint (a floor when it named none), plus up to half as
// much again at random, so refused callers do not return together.
func overloadWait(hint time.Duration) time.Duration {
	hint = max(hint, minOverloadWait)
	return hint + time.Duration(mrand.Int64N(int64(hint/2)+1))
}

// minOverloadWait is the shortest wait after an overload refusal.
const minOverloadWait = 50 * time.Millisecond

// retryable reports whether err is worth trying on another node.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// mayHaveTakenEffect reports whether a failed attempt that is not worth
// sending elsewhere (not retryable) still leaves its outcome unknown: it
// was canceled after it began with the caller's context live (sent, or
// about to be), or a node failed in a way that names no outcome
// (Internal: a handler panicked, or a node older than 2026-12-04 could
// not apply an entry it had committed; Unknown: a handler failed). gRPC's own failures ("grpc: ..."), such as a request
// it could not marshal here or unmarshal there, ran nothing.
func mayHaveTakenEffect(err error, live bool) bool {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Canceled:
		return live
	case codes.Internal, codes.Unknown:
		return !strings.HasPrefix(st.Message(), "grpc:")
	}
	return false
}

// leaderHint returns the leader address an Unavailable carried, if any.
func leaderHint(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	for _, d := range st.Details() {
		if nl, ok := d.(*api.NotLeader); ok {
			return nl.LeaderAddr
		}
	}
	return ""
}

// attemptKind is what one failed attempt of a call tells (see classify).
type attemptKind int

const (
	attemptNotSent       attemptKind = iota // the node could not be reached: nothing was sent
	attemptBroken                           // no answer after sending: the call may have arrived
	attemptNoLeader                         // the node answered that it knows no leader
	attemptIndeterminate                    // the node answered that the outcome is unknown
	attemptAnswered                         // the node answered otherwise (a leader hint, stopping)
)

// classify tells an answer of a node from a failure to reach one. The
// statuses a node sends come from cluster/errors.go's table: a NotLeader
// or ErrorInfo detail, or a message prefixed "cluster:"; gRPC's own say
// that dialling failed, or that the connection broke or the deadline
// passed with the call sent.
func classify(err error) attemptKind {
	st := status.Convert(err)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *api.NotLeader:
			if d.LeaderAddr == "" {
				return attemptNoLeader
			}
			return attemptAnswered
		case *errdetails.ErrorInfo:
			if d.Domain == api.ErrorDomain && d.Reason == api.ReasonIndeterminate {
				return attemptIndeterminate
			}
		}
	}
	msg := st.Message()
	switch {
	case st.Code() == codes.DeadlineExceeded:
		return attemptBroken
	case strings.Contains(msg, "Error while dialing"), strings.Contains(msg, "connection refused"):
		return attemptNotSent
	case strings.HasPrefix(msg, "cluster: no leader"):
		return attemptNoLeader
	case strings.HasPrefix(msg, "cluster:"), strings.Contains(msg, "node stopping"), strings.HasPrefix(msg, "keep-alive:"):
		return attemptAnswered
	}
	return attemptBroken
}
