package history

import "math"

// HeldPrefix starts the Error of an acquire refused because the resource
// was held.
const HeldPrefix = "held: "

// Values of a release record made through the API directly, which tells
// whether the lease was released (the client library's Release does not).
const (
	Released    = "released"
	NotReleased = "not-released"
)

// NeverReturned is the completion time checkers use for a resolved
// operation: it took effect at some point after its invocation.
const NeverReturned = math.MaxInt64

// Answers to an add of an unreachable member (MembershipOutcome's Adds).
const (
	AddRefused = "refused" // FailedPrecondition: the leader refused it
	AddAdded   = "added"   // OK: the leader added it
	AddError   = "error"   // anything else: no decision seen (no leader, timeout, ...)
)

// RequestIDOf is the request id an acquire is sent with: its op id, which
// is unique within a run (every run starts with empty data dirs). The
// workers and the restore nemesis's probe send it; resolving a lost
// answer reads it back.
func RequestIDOf(op string) string { return "jepsen/" + op }
