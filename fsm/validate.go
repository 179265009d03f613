package fsm

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on names carried by commands. They are part of the log format: an
// entry that breaks them is refused identically by every replica.
const (
	MaxNameLen      = 256 // resource and scope, bytes
	MaxHolderLen    = 256 // bytes
	MaxRequestIDLen = 128 // bytes
	LeaseIDLen      = 16  // bytes
)

// ValidateName checks a resource or scope name: 1..MaxNameLen bytes of
// valid UTF-8 without control characters. field names the argument in the
// returned *FieldError.
func ValidateName(field, name string) error {
	if len(name) == 0 {
		return &FieldError{Field: field, Limit: "must not be empty"}
	}
	if len(name) > MaxNameLen {
		return &FieldError{Field: field, Limit: "at most " + strconv.Itoa(MaxNameLen) + " bytes"}
	}
	return validateText(field, name)
}

// ValidateNewName is ValidateName for a name a request brings in (Acquire's
// resource and scope, a Watch key): it also refuses characters that make a
// name display as another (display spoofing in leasectl and logs): the
// bidi embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069,
// and the zero-width U+200B–U+200D and U+FEFF. It is checked where
// requests enter, not in Apply or Restore: logs and snapshots written
// before the rule replay exactly as they did.
func ValidateNewName(field, name string) error {
	if err := ValidateName(field, name); err != nil {
		return err
	}
	return refuseSpoofing(field, name)
}

// ValidateWatchKey checks a Watch key, a name or a name prefix: as
// ValidateNewName, except that it may be empty (a prefix watch of
// everything; the caller decides whether empty is allowed).
func ValidateWatchKey(key string) error {
	if key == "" {
		return nil
	}
	return ValidateNewName("key", key)
}

func refuseSpoofing(field, s string) error {
	for _, r := range s {
		switch {
		case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
			return &FieldError{Field: field, Limit: "must not contain bidirectional control characters (U+202A-U+202E, U+2066-U+2069)"}
		case r >= 0x200B && r <= 0x200D, r == 0xFEFF:
			return &FieldError{Field: field, Limit: "must not contain zero-width characters (U+200B-U+200D, U+FEFF)"}
		}
	}
	return nil
}

// ValidateHolder checks a holder label: at most MaxHolderLen bytes of valid
// UTF-8 without control characters. Empty is allowed.
func ValidateHolder(holder string) error {
	if len(holder) > MaxHolderLen {
		return &FieldError{Field: "holder", Limit: "at most " + strconv.Itoa(MaxHolderLen) + " bytes"}
	}
	return validateText("holder", holder)
}

// ValidateRequestID checks a request id: at most MaxRequestIDLen bytes of
// printable text. Empty means "no retry protection".
func ValidateRequestID(id string) error {
	if len(id) > MaxRequestIDLen {
		return &FieldError{Field: "request_id", Limit: "at most " + strconv.Itoa(MaxRequestIDLen) + " bytes"}
	}
	return validateText("request_id", id)
}

// TTLBounds are what a lease's ttl is checked against (ValidateTTL).
type TTLBounds struct {
	// Min and Max bound the ttl a client may ask for: the node's
	// MinTTL/MaxTTL, checked where a request enters. Max zero: not checked
	// (an entry in the log was checked against its leader's bounds, which
	// a replica need not share).
	Min, Max time.Duration
	// SkewMargin is the cluster's skew margin: a ttl must exceed twice
	// it, or the lease could be judged expired before it was granted. Every
	// replica checks it when applying.
	SkewMargin time.Duration
}

// ValidateTTL is the one rule for a lease's ttl, at every layer that
// checks one: the node's entry (cluster, with its Min/Max) and every
// replica's apply (ValidateAcquire, with the skew margin only). Both call
// it, so the two can never disagree about a ttl within the bounds: a node
// refuses a Config whose MinTTL does not exceed twice its skew margin, so
// whatever its entry accepts, apply accepts. A refusal is a *FieldError
// for "ttl".
func ValidateTTL(ttl time.Duration, b TTLBounds) error {
	if b.Max > 0 && (ttl < b.Min || ttl > b.Max) {
		return &FieldError{Field: "ttl", Limit: fmt.Sprintf("within [%v, %v]", b.Min, b.Max)}
	}
	if ttl <= 0 || ttl <= 2*b.SkewMargin {
		return &FieldError{Field: "ttl", Limit: fmt.Sprintf("must exceed 2 x skew margin (%v)", 2*b.SkewMargin)}
	}
	return nil
}

// ValidateLeaseID checks that a lease id has exactly LeaseIDLen bytes.
func ValidateLeaseID(id []byte) error {
	if len(id) != LeaseIDLen {
		return &FieldError{Field: "lease_id", Limit: "exactly " + strconv.Itoa(LeaseIDLen) + " bytes"}
	}
	return nil
}

func validateText(field, s string) error {
	if !utf8.ValidString(s) {
		return &FieldError{Field: field, Limit: "must be valid UTF-8"}
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return &FieldError{Field: field, Limit: "must not contain control characters"}
		}
	}
	return nil
}
