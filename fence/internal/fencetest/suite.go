// Package fencetest is the conformance suite every guard passes: the seeds'
// stale-holder test, the two rules, independent scopes, concurrency and
// atomicity. Each guard's tests supply a Subject built on that guard.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/leasefence/leasefence/fence"
)

// ErrEffect is what a failing effect returns.
var ErrEffect = errors.New("fencetest: effect failed")

// Subject is one guard wired to a small resource: a per-scope log of the
// tokens whose effects committed.
type Subject struct {
	// Write runs, under tok and through the guard, an effect that appends
	// tok.Value to the scope's log. With fail set the effect appends and
	// then returns ErrEffect; with panics set it appends and then panics.
	// A transactional guard must roll back both the append and the token
	// record; over a non-transactional guard (Memory) the effect itself
	// undoes its append, and the guard must still not record the token.
	Write func(ctx context.Context, tok fence.Token, fail, panics bool) error
	// Log returns the committed log of scope, in commit order.
	Log func(t *testing.T, scope string) []uint64
	// Highest returns the highest token the guard has recorded in scope.
	Highest func(t *testing.T, scope string) uint64
	// Workers is how many goroutines the concurrency test runs (default 16).
	Workers int
	// Writes is how many writes each worker makes (default 50).
	Writes int
}

// Factory returns a fresh, empty Subject deciding with rule.
type Factory func(t *testing.T, rule fence.Rule) Subject

// Run runs the whole suite against newSubject.
func Run(t *testing.T, newSubject Factory) {
	t.Run("StaleHolderIsRejectedAfterNewerWrite", func(t *testing.T) { staleHolder(t, newSubject) })
	t.Run("EqualTokenRepeatsFollowTheRule", func(t *testing.T) { equalRepeats(t, newSubject) })
	t.Run("ScopesAreIndependent", func(t *testing.T) { scopesIndependent(t, newSubject) })
	t.Run("MalformedTokenNeverPasses", func(t *testing.T) { malformed(t, newSubject) })
	t.Run("FailedEffectLeavesNoTokenRecord", func(t *testing.T) { failedEffect(t, newSubject) })
	for _, rule := range []fence.Rule{fence.AtLeast, fence.Strict} {
		t.Run("ConcurrentWritersKeepTokenOrder/"+rule.String(), func(t *testing.T) { concurrent(t, newSubject, rule) })
	}
}

func expectStale(t *testing.T, err error, scope string, presented, highest uint64) {
	t.Helper()
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("error = %v, want ErrStaleToken", err)
	}
	var st *fence.StaleTokenError
	if !errors.As(err, &st) {
		t.Fatalf("error %v is not a *StaleTokenError", err)
	}
	if *st != (fence.StaleTokenError{Scope: scope, Presented: presented, Highest: highest}) {
		t.Fatalf("stale error = %+v, want scope %q presented %d highest %d", *st, scope, presented, highest)
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// staleHolder is the seeds' test: A acquires token 71, pauses; its lease
// expires; B acquires token 72 and writes; A resumes and its write with 71
// is rejected.
func staleHolder(t *testing.T, newSubject Factory) {
	for _, rule := range []fence.Rule{fence.AtLeast, fence.Strict} {
		t.Run(rule.String(), func(t *testing.T) {
			s := newSubject(t, rule)
			ctx := t.Context()
			a := fence.Token{Scope: "jobs/42", Value: 71} // A acquires 71, then pauses
			b := fence.Token{Scope: "jobs/42", Value: 72} // A's lease expires; B acquires 72
			if err := s.Write(ctx, b, false, false); err != nil {
				t.Fatalf("B's write with 72: %v", err)
			}
			err := s.Write(ctx, a, false, false) // A resumes and writes with 71
			expectStale(t, err, "jobs/42", 71, 72)
			if got := s.Log(t, "jobs/42"); !equal(got, []uint64{72}) {
				t.Fatalf("log = %v, want [72]: A's effect must not stick", got)
			}
			if h := s.Highest(t, "jobs/42"); h != 72 {
				t.Fatalf("highest = %d, want 72", h)
			}
		})
	}
}

func equalRepeats(t *testing.T, newSubject Factory) {
	t.Run("at-least accepts", func(t *testing.T) {
		s := newSubject(t, fence.AtLeast)
		tok := fence.Token{Scope: "s", Value: 5}
		for i := 0; i < 3; i++ {
			if err := s.Write(t.Context(), tok, false, false); err != nil {
				t.Fatalf("write %d with the same token: %v", i, err)
			}
		}
		if got := s.Log(t, "s"); !equal(got, []uint64{5, 5, 5}) {
			t.Fatalf("log = %v, want [5 5 5]", got)
		}
	})
	t.Run("strict rejects", func(t *testing.T) {
		s := newSubject(t, fence.Strict)
		tok := fence.Token{Scope: "s", Value: 5}
		if err := s.Write(t.Context(), tok, false, false); err != nil {
			t.Fatal(err)
		}
		expectStale(t, s.Write(t.Context(), tok, false, false), "s", 5, 5)
		if err := s.Write(t.Context(), fence.Token{Scope: "s", Value: 6}, false, false); err != nil {
			t.Fatalf("higher token after a refusal: %v", err)
		}
		if got := s.Log(t, "s"); !equal(got, []uint64{5, 6}) {
			t.Fatalf("log = %v, want [5 6]", got)
		}
	})
}

func scopesIndependent(t *testing.T, newSubject Factory) {
	s := newSubject(t, fence.AtLeast)
	ctx := t.Context()
	if err := s.Write(ctx, fence.Token{Scope: "shard-1", Value: 1000}, false, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, fence.Token{Scope: "shard-2", Value: 1}, false, false); err != nil {
		t.Fatalf("a low token in another scope: %v", err)
	}
	expectStale(t, s.Write(ctx, fence.Token{Scope: "shard-1", Value: 999}, false, false), "shard-1", 999, 1000)
	if err := s.Write(ctx, fence.Token{Scope: "shard-2", Value: 2}, false, false); err != nil {
		t.Fatal(err)
	}
	if h1, h2 := s.Highest(t, "shard-1"), s.Highest(t, "shard-2"); h1 != 1000 || h2 != 2 {
		t.Fatalf("highest = %d, %d; want 1000, 2", h1, h2)
	}
}

func malformed(t *testing.T, newSubject Factory) {
	s := newSubject(t, fence.AtLeast)
	for _, tok := range []fence.Token{{Scope: "s", Value: 0}, {Scope: "", Value: 3}, {Scope: "a\nb", Value: 3}} {
		if err := s.Write(t.Context(), tok, false, false); !errors.Is(err, fence.ErrMalformedToken) {
			t.Fatalf("Write(%+v) = %v, want ErrMalformedToken", tok, err)
		}
	}
	if got := s.Log(t, "s"); len(got) != 0 {
		t.Fatalf("log = %v after malformed tokens, want empty", got)
	}
}

// failedEffect: an effect that fails (or panics) rolls back the token
// record, so a token between the highest and the failed one still passes;
// and a token record is never kept without its effect.
func failedEffect(t *testing.T, newSubject Factory) {
	s := newSubject(t, fence.Strict)
	ctx := t.Context()
	if err := s.Write(ctx, fence.Token{Scope: "s", Value: 10}, false, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, fence.Token{Scope: "s", Value: 20}, true, false); !errors.Is(err, ErrEffect) {
		t.Fatalf("failing effect: error = %v, want ErrEffect", err)
	}
	if h := s.Highest(t, "s"); h != 10 {
		t.Fatalf("highest = %d after a failed effect with 20, want 10", h)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the effect's panic was swallowed")
			}
		}()
		_ = s.Write(ctx, fence.Token{Scope: "s", Value: 30}, false, true)
	}()
	if h := s.Highest(t, "s"); h != 10 {
		t.Fatalf("highest = %d after a panicking effect with 30, want 10", h)
	}
	if got := s.Log(t, "s"); !equal(got, []uint64{10}) {
		t.Fatalf("log = %v, want [10]: failed effects must leave nothing", got)
	}
	// The failed tokens were not recorded, so 11 is admitted.
	if err := s.Write(ctx, fence.Token{Scope: "s", Value: 11}, false, false); err != nil {
		t.Fatalf("11 after failed 20 and 30: %v", err)
	}
	if got, h := s.Log(t, "s"), s.Highest(t, "s"); !equal(got, []uint64{10, 11}) || h != 11 {
		t.Fatalf("log = %v, highest %d; want [10 11], 11", got, h)
	}
}

type attempt struct {
	tok fence.Token
	err error
}

// concurrent: many writers with random tokens on a few scopes; afterwards
// each scope's committed log never decreases (strictly increases under
// Strict), the recorded highest is the log's last entry, every acknowledged
// write is in the log, and every refusal names a higher (or, under Strict,
// equal) token that was really accepted.
func concurrent(t *testing.T, newSubject Factory, rule fence.Rule) {
	s := newSubject(t, rule)
	workers, writes := s.Workers, s.Writes
	if workers == 0 {
		workers = 16
	}
	if writes == 0 {
		writes = 50
	}
	scopes := []string{"a", "b", "c"}
	results := make([][]attempt, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < writes; i++ {
				// Tokens drift upwards with jitter, as successive holders'
				// do, so both acceptances and refusals are common.
				tok := fence.Token{Scope: scopes[r.IntN(len(scopes))], Value: uint64(1 + i/2 + r.IntN(8))}
				err := s.Write(t.Context(), tok, false, false)
				results[w] = append(results[w], attempt{tok, err})
			}
		}()
	}
	wg.Wait()
	accepted := map[string]map[uint64]int{}
	stale := 0
	for _, rs := range results {
		for _, a := range rs {
			if accepted[a.tok.Scope] == nil {
				accepted[a.tok.Scope] = map[uint64]int{}
			}
			if a.err == nil {
				accepted[a.tok.Scope][a.tok.Value]++
				continue
			}
			st, ok := fence.IsStale(a.err)
			if !ok {
				t.Fatalf("write %+v: unexpected error %v", a.tok, a.err)
			}
			stale++
			if st.Presented != a.tok.Value || st.Scope != a.tok.Scope || rule.Admits(st.Presented, st.Highest) {
				t.Fatalf("refusal %+v of %+v: the rule admits it", *st, a.tok)
			}
		}
	}
	if stale == 0 {
		t.Fatal("no write was refused: the test exercised nothing")
	}
	for _, scope := range scopes {
		log := s.Log(t, scope)
		seen := map[uint64]int{}
		for i, v := range log {
			seen[v]++
			if i > 0 && !rule.Admits(v, log[i-1]) {
				t.Fatalf("scope %s: accepted %d after %d (log %v)", scope, v, log[i-1], log)
			}
		}
		for v, n := range accepted[scope] {
			if seen[v] != n {
				t.Fatalf("scope %s: token %d acknowledged %d times, in the log %d times", scope, v, n, seen[v])
			}
		}
		if len(log) != sumCounts(accepted[scope]) {
			t.Fatalf("scope %s: log has %d entries, %d writes acknowledged", scope, len(log), sumCounts(accepted[scope]))
		}
		want := uint64(0)
		if len(log) > 0 {
			want = log[len(log)-1]
		}
		if h := s.Highest(t, scope); h != want {
			t.Fatalf("scope %s: highest %d, last committed effect %d", scope, h, want)
		}
	}
	// Every refusal was against a token that was really accepted.
	for _, rs := range results {
		for _, a := range rs {
			if st, ok := fence.IsStale(a.err); ok && accepted[st.Scope][st.Highest] == 0 {
				t.Fatalf("refusal %+v names highest %d, which was never accepted", *st, st.Highest)
			}
		}
	}
	t.Logf("%d workers x %d writes: %d refused as stale", workers, writes, stale)
}

func sumCounts(m map[uint64]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// Name returns a name unique within the process, for tables and buckets.
func Name(prefix string) string {
	nameMu.Lock()
	defer nameMu.Unlock()
	nameSeq++
	return fmt.Sprintf("%s_%d_%d", prefix, rand.Uint32(), nameSeq)
}

var (
	nameMu  sync.Mutex
	nameSeq int
)
