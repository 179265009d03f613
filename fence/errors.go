package fence

import (
	"errors"
	"fmt"
)

// Errors of the fence package. Guards in the subpackages return these too,
// so that callers test with errors.Is whatever the backend.
var (
	// ErrStaleToken is matched (through errors.Is) by every
	// *StaleTokenError: a token lower than the highest accepted in its scope
	// (or equal to it, under Strict). It is normal recovery for the holder,
	// not a failure of the resource: re-read, re-acquire, move on.
	ErrStaleToken = errors.New("fence: stale token")
	// ErrNoToken is returned when a request carries no fencing token at all.
	// A missing token never passes.
	ErrNoToken = errors.New("fence: no fencing token")
	// ErrMalformedToken is returned when a token cannot be parsed or is not
	// usable: an empty scope, a scope that is not valid UTF-8 or holds
	// control characters, a value that is not a positive decimal integer.
	// The lease service never issues token 0, so 0 is malformed.
	ErrMalformedToken = errors.New("fence: malformed fencing token")
)

// StaleTokenError says that Presented was refused in Scope because Highest
// had already been accepted there. errors.Is(err, ErrStaleToken) is true for
// it.
type StaleTokenError struct {
	// Scope is the fencing sequence the token belongs to.
	Scope string
	// Presented is the token that was refused.
	Presented uint64
	// Highest is the highest token accepted in Scope when it was refused.
	Highest uint64
}

// Error reports the scope and both tokens.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token: scope %q presented %d, highest accepted %d", e.Scope, e.Presented, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// IsStale reports whether err is (or wraps) a stale-token refusal and, if
// so, returns it.
func IsStale(err error) (*StaleTokenError, bool) {
	var st *StaleTokenError
	if errors.As(err, &st) {
		return st, true
	}
	return nil, false
}
