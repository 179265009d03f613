package fencesql

import (
	"errors"
	"fmt"

	"github.com/leasefence/leasefence/fence"
)

// Errors of package fencesql. A refused token is a *fence.StaleTokenError
// (errors.Is fence.ErrStaleToken), as with every guard.
var (
	// ErrTokenRange is returned for a token above math.MaxInt64: SQL's
	// BIGINT is signed. The lease service starts at 1 and counts up, so no
	// real token gets there. It wraps fence.ErrMalformedToken, so the wire
	// answers it as a malformed token (400, InvalidArgument).
	ErrTokenRange = fmt.Errorf("fencesql: token exceeds the BIGINT range: %w", fence.ErrMalformedToken)
	// ErrBadTable is returned by New for a table name that is not a plain
	// (optionally schema-qualified) SQL identifier.
	ErrBadTable = errors.New("fencesql: bad table name")
	// ErrUnknownDialect is returned by New for a Dialect it does not know.
	ErrUnknownDialect = errors.New("fencesql: unknown dialect")
)
