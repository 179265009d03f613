package fsm

import (
	"errors"
	"testing"
)

func TestNewNamesAndWatchKeysRefuseDisplaySpoofing(t *testing.T) {
	for _, bad := range []string{"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b", "\u200c", "\u200d", "\ufeff"} {
		name := "db/" + bad + "39"
		var fe *FieldError
		if err := ValidateNewName("resource", name); !errors.As(err, &fe) || fe.Field != "resource" {
			t.Errorf("ValidateNewName(%q) = %v", name, err)
		}
		if err := ValidateWatchKey(name); !errors.As(err, &fe) || fe.Field != "key" {
			t.Errorf("ValidateWatchKey(%q) = %v", name, err)
		}
		// Apply and Restore keep the rule of the log format.
		if err := ValidateName("resource", name); err != nil {
			t.Errorf("ValidateName(%q) = %v: replaying an old log would change", name, err)
		}
	}
	for _, bad := range []string{"a\x00", "a\x1b", "\xff", string(make([]byte, MaxNameLen+1))} {
		if ValidateWatchKey(bad) == nil {
			t.Errorf("ValidateWatchKey(%q) accepted", bad)
		}
	}
	for _, good := range []string{"db/39", "ünïcödé/日本/\u05d0", "a\u2070"} {
		if err := ValidateNewName("resource", good); err != nil {
			t.Errorf("ValidateNewName(%q) = %v", good, err)
		}
	}
	if ValidateWatchKey("") != nil {
		t.Error("an empty watch key (a prefix watch of everything) refused")
	}
}
