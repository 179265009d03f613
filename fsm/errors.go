package fsm

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Domain errors returned in a Result. They are deterministic: every replica
// applying the same entry returns the same error.
var (
	// ErrInvalidArgument is returned (wrapped in a *FieldError) when a
	// command carries a bad name, ttl or size.
	ErrInvalidArgument = errors.New("fsm: invalid argument")
	// ErrHeld is returned (wrapped in a *HeldError) when Acquire names a
	// resource whose lease is not yet past expires_at + skew_margin.
	ErrHeld = errors.New("fsm: resource held")
	// ErrNotFound is returned by Renew when the lease id is unknown or the
	// lease is past its expires_at.
	ErrNotFound = errors.New("fsm: lease not found or expired")
	// ErrRequestIDReused is returned when a request id is presented again
	// with any parameter other than its first use's: resource, effective
	// scope, holder, ttl or wait. A request id names one request; nothing
	// changes. errors.Is(err, ErrInvalidArgument) is true too.
	ErrRequestIDReused = &reusedError{}
	// ErrLeaseEnded is returned (wrapped in an *EndedError) when an
	// Acquire's request id replays a grant whose lease has since ended
	// (released, or past its expires_at): the caller holds nothing.
	ErrLeaseEnded = errors.New("fsm: the lease granted to this request id has ended")
)

// reusedError is ErrRequestIDReused's type: an invalid argument.
type reusedError struct{}

func (*reusedError) Error() string {
	return "fsm: request id reused with other parameters (a request id names one request)"
}

// Unwrap makes errors.Is(ErrRequestIDReused, ErrInvalidArgument) true.
func (*reusedError) Unwrap() error { return ErrInvalidArgument }

// EndedError is the answer to a replayed Acquire whose grant has ended.
type EndedError struct {
	RequestID string
	// Lease is the grant as it was last held.
	Lease Lease
}

func (e *EndedError) Error() string {
	// The id in api.FormatLeaseID's form (fsm may not import api: it
	// would pull in gRPC).
	return fmt.Sprintf("fsm: request id %q was granted lease %s on %q (token %d), which has ended", e.RequestID, base64.StdEncoding.EncodeToString(e.Lease.ID[:]), e.Lease.Resource, e.Lease.Token)
}

// Unwrap makes errors.Is(err, ErrLeaseEnded) true.
func (e *EndedError) Unwrap() error { return ErrLeaseEnded }

// Errors of Apply itself: the entry cannot be applied at all. A node that
// meets one must stop, or replicas would diverge.
var (
	// ErrCorruptEntry is returned when an entry's bytes do not decode.
	ErrCorruptEntry = errors.New("fsm: corrupt log entry")
	// ErrChecksum is returned (wrapped, and wrapping ErrCorruptEntry) when
	// a checksummed entry's bytes do not match its checksum: they changed
	// after the leader wrote them (disk or memory corruption).
	ErrChecksum = fmt.Errorf("%w: checksum mismatch", ErrCorruptEntry)
	// ErrUnknownEntry is returned for an entry type this version does not
	// know and that is not marked ignorable.
	ErrUnknownEntry = errors.New("fsm: unknown log entry type")
	// ErrCorruptSnapshot is returned by Restore for undecodable snapshot
	// bytes; no state is changed.
	ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")
)

// ErrTokenOverflow is returned by RaiseFloor (a restore) when the new token
// floor would pass 2^64-1; the state is unchanged.
var ErrTokenOverflow = errors.New("fsm: token floor would overflow")

// FieldError says which field of a command is invalid and what its limit is.
type FieldError struct {
	Field string
	Limit string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("fsm: invalid %s: %s", e.Field, e.Limit)
}

// Unwrap makes errors.Is(err, ErrInvalidArgument) true.
func (e *FieldError) Unwrap() error { return ErrInvalidArgument }

// HeldError describes the lease that blocks an Acquire.
type HeldError struct {
	Resource string
	Holder   string
	Token    uint64
	// TimeLeft is how long until the resource may be granted again:
	// expires_at + skew_margin - now, at the refusing command's stamp.
	TimeLeft time.Duration
}

// Error says which lease holds the resource. Built without fmt: a leader
// under contention refuses many times more acquires than it grants.
func (e *HeldError) Error() string {
	b := make([]byte, 0, 64+len(e.Resource)+len(e.Holder))
	b = append(b, "fsm: resource "...)
	b = strconv.AppendQuote(b, e.Resource)
	b = append(b, " held by "...)
	b = strconv.AppendQuote(b, e.Holder)
	b = append(b, " (token "...)
	b = strconv.AppendUint(b, e.Token, 10)
	b = append(b, "), free in "...)
	b = append(b, e.TimeLeft.String()...)
	return string(b)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }
