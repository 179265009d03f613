package fence

import (
	"context"
	"fmt"
)

// Rule says which tokens a guard admits relative to the highest it has
// accepted in the same scope.
type Rule int

const (
	// AtLeast admits token >= highest: a holder may make many writes under
	// one lease. It is the default (the zero Rule).
	AtLeast Rule = iota
	// Strict admits token > highest only: one effect per grant, for
	// one-shot effects (send once, charge once).
	Strict
)

// Admits reports whether token may act when highest has been accepted.
// Every guard decides with this one function.
func (r Rule) Admits(token, highest uint64) bool {
	if r == Strict {
		return token > highest
	}
	return token >= highest
}

// String returns "at-least" or "strict".
func (r Rule) String() string {
	if r == Strict {
		return "strict"
	}
	return "at-least"
}

// ParseRule parses "at-least" (also "default" and "") or "strict".
func ParseRule(s string) (Rule, error) {
	switch s {
	case "", "at-least", "default":
		return AtLeast, nil
	case "strict":
		return Strict, nil
	}
	return 0, fmt.Errorf("fence: unknown rule %q (want at-least or strict)", s)
}

// Guard runs effects under fencing tokens. Do runs effect only if tok is
// admitted in tok.Scope, and records tok as the scope's highest if and only
// if effect returns nil, atomically with respect to every other Do on the
// same scope: no two effects of a scope overlap, and the accepted tokens of
// a scope, in the order their effects completed, never decrease.
//
// Do returns a *StaleTokenError (errors.Is ErrStaleToken) without running
// effect when tok is refused, an error wrapping ErrMalformedToken for an
// unusable token, and effect's error unchanged when effect fails.
//
// How far the atomicity reaches depends on the guard: Memory is atomic
// within one process and forgets on restart; fencebolt's guard records the
// token in the same bbolt transaction as effects written through that
// transaction (see fencebolt.Guard.Update), so an effect elsewhere that
// succeeded just before a crash may stand without its record. Effects that
// must survive crashes together with their token belong in the guard's own
// transaction (fencebolt.Guard.Update, fencesql.Guard.Check).
type Guard interface {
	Do(ctx context.Context, tok Token, effect func(context.Context) error) error
}
