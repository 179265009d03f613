package fence_test

import (
	"errors"
	"testing"

	"github.com/leasefence/leasefence/fence"
)

// FuzzParseHeader: any header value either parses to a valid token whose
// canonical form parses back to the same token, or is refused as missing or
// malformed; never a panic, never a token that fails Validate.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"", " ", "jobs/42=7", "a%3Db=1", "s=71, s=72", "x=18446744073709551615", "=5", "a%zz=1", "ünï=3", "a\x00=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, err := fence.ParseHeader(v)
		if err != nil {
			if !errors.Is(err, fence.ErrNoToken) && !errors.Is(err, fence.ErrMalformedToken) {
				t.Fatalf("ParseHeader(%q): unexpected error kind %v", v, err)
			}
			return
		}
		if err := tok.Validate(); err != nil {
			t.Fatalf("ParseHeader(%q) accepted an invalid token %+v: %v", v, tok, err)
		}
		back, err := fence.ParseHeader(fence.FormatHeader(tok))
		if err != nil || back != tok {
			t.Fatalf("round trip of %+v: %+v, %v", tok, back, err)
		}
	})
}

// FuzzParseParts covers the gRPC metadata form (scope and value apart).
func FuzzParseParts(f *testing.F) {
	f.Add("jobs/42", "7")
	f.Add("", "1")
	f.Add("s", "0")
	f.Add("s", "-1")
	f.Add("s\n", "3")
	f.Fuzz(func(t *testing.T, scope, value string) {
		tok, err := fence.ParseParts(scope, value)
		if err != nil {
			if !errors.Is(err, fence.ErrMalformedToken) && !errors.Is(err, fence.ErrNoToken) {
				t.Fatalf("ParseParts(%q, %q): unexpected error kind %v", scope, value, err)
			}
			return
		}
		if tok.Validate() != nil || tok.Scope != scope || tok.Value == 0 {
			t.Fatalf("ParseParts(%q, %q) = %+v", scope, value, tok)
		}
	})
}
