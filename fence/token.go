package fence

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxScopeLen is the longest scope accepted, in bytes: the longest resource
// name the lease service grants.
const MaxScopeLen = 256

// Token is a fencing token together with the scope (fencing sequence) it was
// drawn from. Tokens of different scopes are not comparable.
type Token struct {
	// Scope names the fencing sequence: the resource name by default, or
	// the explicit scope of the grant.
	Scope string
	// Value strictly increases per scope over the life of the lease
	// cluster. The lease service never issues 0.
	Value uint64
}

// TokenSource is anything that names a scope and a token, such as the
// client library's *client.Lease. (For an *api.Lease write
// Token{Scope: l.GetScope(), Value: l.GetToken()}.)
type TokenSource interface {
	Scope() string
	Token() uint64
}

// TokenOf returns the token carried by s, e.g. fence.TokenOf(lease) for a
// *client.Lease.
func TokenOf(s TokenSource) Token { return Token{Scope: s.Scope(), Value: s.Token()} }

// Validate returns nil for a usable token and an error wrapping
// ErrMalformedToken otherwise: the scope must be 1..MaxScopeLen bytes of
// UTF-8 without control characters, the value positive.
func (t Token) Validate() error {
	if err := validScope(t.Scope); err != nil {
		return err
	}
	if t.Value == 0 {
		return fmt.Errorf("%w: token must be positive", ErrMalformedToken)
	}
	return nil
}

func validScope(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty scope", ErrMalformedToken)
	case len(s) > MaxScopeLen:
		return fmt.Errorf("%w: scope longer than %d bytes", ErrMalformedToken, MaxScopeLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: scope is not UTF-8", ErrMalformedToken)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: control character in scope", ErrMalformedToken)
		}
	}
	return nil
}

// String returns the wire form "<scope>=<token>" used by the Fencing-Token
// HTTP header (see FormatHeader).
func (t Token) String() string { return FormatHeader(t) }

// FormatHeader returns "<scope>=<token>". Bytes of the scope outside
// printable ASCII, and '%', ',' and '=', are written as %XX so that the
// value is a valid header and metadata value that a proxy joining repeated
// headers with commas cannot turn into another valid token; a plain name
// such as "jobs/42" stays as it is.
func FormatHeader(t Token) string {
	return EscapeScope(t.Scope) + "=" + strconv.FormatUint(t.Value, 10)
}

// ParseHeader parses "<scope>=<token>" (the scope as written by
// FormatHeader; the last '=' separates it from the token). An empty value is
// ErrNoToken; anything unusable wraps ErrMalformedToken.
func ParseHeader(v string) (Token, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Token{}, ErrNoToken
	}
	i := strings.LastIndexByte(v, '=')
	if i < 0 {
		return Token{}, fmt.Errorf("%w: %q is not <scope>=<token>", ErrMalformedToken, v)
	}
	// An escaped scope has no raw '=', ',' or white space: their presence
	// means several values were joined into one (e.g. "s=71, s=72").
	if strings.ContainsAny(v[:i], "=, \t") {
		return Token{}, fmt.Errorf("%w: %q holds more than one <scope>=<token>", ErrMalformedToken, v)
	}
	scope, err := UnescapeScope(v[:i])
	if err != nil {
		return Token{}, err
	}
	return ParseParts(scope, v[i+1:])
}

// ParseParts builds a token from an already unescaped scope and a decimal
// value (the two gRPC metadata entries) and validates it.
func ParseParts(scope, value string) (Token, error) {
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: token %q is not a decimal integer", ErrMalformedToken, value)
	}
	t := Token{Scope: scope, Value: n}
	if err := t.Validate(); err != nil {
		return Token{}, err
	}
	return t, nil
}

// EscapeScope writes bytes outside printable ASCII, and '%', ',' and '=',
// as %XX.
func EscapeScope(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || c == '%' || c == ',' || c == '=' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// UnescapeScope reverses EscapeScope; a '%' not followed by two hex digits
// wraps ErrMalformedToken.
func UnescapeScope(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: bad escape in scope %q", ErrMalformedToken, s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("%w: bad escape in scope %q", ErrMalformedToken, s)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

type ctxKey struct{}

// NewContext returns a context carrying t. Server middleware stores the
// token it admitted there for the handler; the client interceptors and
// round tripper send the token found there.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the token stored by NewContext, if any.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(Token)
	return t, ok
}
