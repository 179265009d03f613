//go:build plantedbugs

package fsm

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// planting returns the option that builds a State with bugs, failing t on
// a name this package does not know.
func planting(t testing.TB, bugs ...string) Option {
	t.Helper()
	k := TestingKnobs{PlantedBugs: bugs}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	return WithTestingKnobs(k)
}

func TestKnobsRefuseAnUnknownPlantedBug(t *testing.T) {
	k := TestingKnobs{PlantedBugs: []string{BugGrantNoMargin, "no-such-bug"}}
	if err := k.Validate(); err == nil {
		t.Fatal("unknown planted bug accepted")
	}
}

// Planted bugs belong to the State built with them: a State in the same
// process built without them keeps the margin, and the one with them does
// not.
func TestPlantedBugIsPerState(t *testing.T) {
	planted, plain := New(planting(t, BugGrantNoMargin)), New()
	for _, s := range []*State{planted, plain} {
		apply(t, s, 1*sec, acquireCmd("r", 10*sec, 1, ""))
		// Past expires_at (11 s), inside the skew margin.
		r := apply(t, s, 11*sec+testMargin, acquireCmd("r", 10*sec, 2, ""))
		if got, want := r.Err == nil, s == planted; got != want {
			t.Errorf("planted %v: second grant inside the margin granted %v (%+v)", s == planted, got, r)
		}
	}
}

// A planted skip-entry-checksum skips the check of VerifyEntry and Apply
// given it, and of no other.
func TestPlantedSkipEntryChecksumIsPerStateAndCheck(t *testing.T) {
	good := entry(t, 1*sec, acquireCmd("db/39", 10*sec, 2, ""))
	bad := bytes.Clone(good)
	bad[bytes.Index(good, []byte("db/39"))+1] = 'X'
	bug := planting(t, BugSkipEntryChecksum)
	if err := VerifyEntry(bad, bug); err != nil {
		t.Errorf("planted VerifyEntry: %v", err)
	}
	if err := VerifyEntry(bad); !errors.Is(err, ErrChecksum) {
		t.Errorf("VerifyEntry without knobs: want ErrChecksum, got %v", err)
	}
	if _, err := New(bug).Apply(bad); err != nil {
		t.Errorf("planted Apply: %v", err)
	}
	if _, err := New().Apply(bad); !errors.Is(err, ErrChecksum) {
		t.Errorf("Apply without knobs: want ErrChecksum, got %v", err)
	}
}

// A planted ignorable-unchecked skips an ignorable entry whose checksum
// does not match (a type byte's flipped high bit) in VerifyEntry and Apply
// given it, and in no other.
func TestPlantedIgnorableUncheckedIsPerStateAndCheck(t *testing.T) {
	good := entry(t, 1*sec, acquireCmd("db/40", 10*sec, 2, ""))
	bad := bytes.Clone(good)
	bad[0] ^= byte(EntryIgnorable)
	bug := planting(t, BugIgnorableUnchecked)
	if err := VerifyEntry(bad, bug); err != nil {
		t.Errorf("planted VerifyEntry: %v", err)
	}
	if err := VerifyEntry(bad); !errors.Is(err, ErrChecksum) {
		t.Errorf("VerifyEntry without knobs: want ErrChecksum, got %v", err)
	}
	s := New(bug)
	if a, err := s.Apply(bad); err != nil || len(a.Results) != 0 || s.Len() != 0 {
		t.Errorf("planted Apply: %v, %v, %d leases; want the entry skipped", a, err, s.Len())
	}
	if _, err := New().Apply(bad); !errors.Is(err, ErrChecksum) {
		t.Errorf("Apply without knobs: want ErrChecksum, got %v", err)
	}
}

// The restore property must catch issue 13's restore: with only the
// backup's scopes raised, some random disaster has a scope first used after
// the backup grant a token it had already granted before the loss.
func TestRestorePropertyCatchesRestoreBumpsKnownScopes(t *testing.T) {
	bug := planting(t, BugRestoreBumpsKnownScopes)
	var (
		caught     string
		runs, hits int
	)
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		if v := checkRestoreBeatsLostTokens(rt, bug); v != "" {
			hits++
			if caught == "" {
				caught = v
			}
		}
	})
	if caught == "" {
		t.Fatalf("planted %s: no violation in %d random disasters", BugRestoreBumpsKnownScopes, runs)
	}
	t.Logf("caught in %d of %d random disasters, first: %s", hits, runs, caught)
}
