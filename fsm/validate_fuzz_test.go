package fsm

import (
	"errors"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzValidateName: the API's name validator accepts exactly 1..256 bytes of
// valid UTF-8 without control characters, and refuses everything else with
// an InvalidArgument FieldError.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "jobs/42", "a\x00b", "\xff", "ключ", string(make([]byte, 257))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName("resource", s)
		want := len(s) >= 1 && len(s) <= MaxNameLen && utf8.ValidString(s)
		if want {
			for _, r := range s {
				if unicode.IsControl(r) {
					want = false
				}
			}
		}
		if want != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v, want ok=%v", s, err, want)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || !errors.Is(err, ErrInvalidArgument)) {
			t.Fatalf("ValidateName(%q): %v is not a FieldError", s, err)
		}
	})
}
