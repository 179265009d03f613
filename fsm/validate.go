package fsm

import (
	"strconv"
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
