package fence_test

import (
	"errors"
	"testing"

	"github.com/leasefence/leasefence/fence"
)

func TestHeaderRoundTripsEveryScope(t *testing.T) {
	for _, scope := range []string{"jobs/42", "shard-7", "a=b", "100%", "with space", "ünïcode/ключ", " lead", "x=", "a,b", "s=71, s"} {
		tok := fence.Token{Scope: scope, Value: 18446744073709551615}
		h := fence.FormatHeader(tok)
		got, err := fence.ParseHeader(h)
		if err != nil || got != tok {
			t.Errorf("ParseHeader(%q) = %+v, %v; want %+v", h, got, err, tok)
		}
	}
	if h := fence.FormatHeader(fence.Token{Scope: "jobs/42", Value: 7}); h != "jobs/42=7" {
		t.Errorf("plain scope written as %q, want jobs/42=7", h)
	}
}

func TestParseHeaderRefusesWhatIsNotAToken(t *testing.T) {
	if _, err := fence.ParseHeader("  "); !errors.Is(err, fence.ErrNoToken) {
		t.Errorf("empty header: %v, want ErrNoToken", err)
	}
	for _, v := range []string{"jobs", "=5", "jobs=", "jobs=abc", "jobs=-1", "jobs=+1", "jobs=0", "jobs=1.5",
		"jobs=18446744073709551616", "a%2=1", "a%zz=1", "a%0Ab=1", "jobs=0x10",
		// Two headers joined by a proxy must not read as one new scope.
		"s=71, s=72", "s=71,s=72", "a=b=3", "a b=3"} {
		if tok, err := fence.ParseHeader(v); !errors.Is(err, fence.ErrMalformedToken) {
			t.Errorf("ParseHeader(%q) = %+v, %v; want ErrMalformedToken", v, tok, err)
		}
	}
}

func TestStaleTokenErrorMatchesSentinel(t *testing.T) {
	var err error = &fence.StaleTokenError{Scope: "s", Presented: 71, Highest: 72}
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatal("errors.Is(StaleTokenError, ErrStaleToken) = false")
	}
	if errors.Is(err, fence.ErrMalformedToken) {
		t.Fatal("a stale error matches ErrMalformedToken")
	}
	if st, ok := fence.IsStale(errors.Join(errors.New("write"), err)); !ok || st.Highest != 72 {
		t.Fatalf("IsStale on a wrapped error = %v, %v", st, ok)
	}
	if got := err.Error(); got != `fence: stale token: scope "s" presented 71, highest accepted 72` {
		t.Fatalf("message %q", got)
	}
}

func TestRuleDecidesAsDocumented(t *testing.T) {
	cases := []struct {
		rule           fence.Rule
		token, highest uint64
		want           bool
	}{
		{fence.AtLeast, 5, 4, true}, {fence.AtLeast, 5, 5, true}, {fence.AtLeast, 4, 5, false},
		{fence.Strict, 5, 4, true}, {fence.Strict, 5, 5, false}, {fence.Strict, 4, 5, false},
		{fence.AtLeast, 1, 0, true}, {fence.Strict, 1, 0, true},
	}
	for _, c := range cases {
		if got := c.rule.Admits(c.token, c.highest); got != c.want {
			t.Errorf("%v.Admits(%d, %d) = %v", c.rule, c.token, c.highest, got)
		}
	}
	for _, s := range []string{"", "default", "at-least", "strict"} {
		if _, err := fence.ParseRule(s); err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
		}
	}
	if _, err := fence.ParseRule("lax"); err == nil {
		t.Error("ParseRule(lax) accepted")
	}
}
