package checker

import (
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

func TestCheckLostVoterRefused(t *testing.T) {
	heal := func(o *history.LostVoterOutcome) history.Fault {
		return history.Fault{Phase: "heal", Kind: history.NemLostVoter, Target: "n2", LostVoter: o}
	}
	for _, tc := range []struct {
		name    string
		faults  []history.Fault
		verdict string
	}{
		{"refused", []history.Fault{heal(&history.LostVoterOutcome{Refused: true})}, Valid},
		{"ran as a member", []history.Fault{heal(&history.LostVoterOutcome{Refused: true}), heal(&history.LostVoterOutcome{Served: true})}, Invalid},
		{"neither", []history.Fault{heal(&history.LostVoterOutcome{})}, history.Unknown},
		{"no fault", []history.Fault{{Phase: "heal", Kind: history.NemStorage, Storage: &history.StorageOutcome{Index: 3, Served: true}}}, history.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckLostVoterRefused(tc.faults)
			if r.Verdict != tc.verdict || (tc.verdict == Invalid) != (r.Anomaly == AnomalyLostVoterServed) {
				t.Fatalf("got %s %s (%s), want %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict)
			}
		})
	}
}
