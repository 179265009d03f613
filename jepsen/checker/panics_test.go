package checker

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

func TestCheckNoPanics(t *testing.T) {
	clean := []byte("2026-12-03T12:58:18.568Z [INFO]  n2: lost leadership\n" +
		"2026-12-03T12:58:18.600Z [WARN]  n2: a message that says panic: in its text\n")
	crashed := []byte("2026-12-03T12:58:18.568Z [INFO]  n3.raft: Installed remote snapshot\n" +
		"panic: log not found\n\ngoroutine 1 [running]:\n")
	fatal := []byte("fatal error: concurrent map writes\n")
	for _, tc := range []struct {
		name    string
		logs    map[string][]byte
		verdict string
		witness string
	}{
		{"clean logs", map[string][]byte{"n1.log": clean, "fencedkv.log": clean}, Valid, ""},
		{"a node panicked", map[string][]byte{"n1.log": clean, "n3.log": crashed}, Invalid, "n3.log, line 2: panic: log not found"},
		{"a fatal runtime error", map[string][]byte{"w1.log": fatal}, Invalid, "w1.log, line 1: fatal error: concurrent map writes"},
		{"no logs", map[string][]byte{}, history.Unknown, "nothing to check"},
		{"a line too long to read", map[string][]byte{"n1.log": []byte(strings.Repeat("x", 2<<20))}, history.Unknown, "could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckNoPanics(tc.logs)
			if r.Verdict != tc.verdict || !strings.Contains(r.Witness, tc.witness) {
				t.Fatalf("got %v, want %s with witness containing %q", r, tc.verdict, tc.witness)
			}
			if tc.verdict == Invalid && r.Anomaly != AnomalyPanicked {
				t.Fatalf("anomaly %q, want %q", r.Anomaly, AnomalyPanicked)
			}
		})
	}
}
