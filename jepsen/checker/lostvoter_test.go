package checker

import (
	"strings"
	"testing"

	"github.com/leasefence/leasefence/jepsen/history"
)

func TestCheckLostVoterRefused(t *testing.T) {
	heal := func(o *history.LostVoterOutcome) history.Fault {
		return history.Fault{Phase: "heal", Kind: history.NemLostVoter, Target: "n2", LostVoter: o}
	}
	join, boot, alone := history.LostVoterViaJoin, history.LostVoterViaBootstrap, history.LostVoterViaBootstrapAlone
	for _, tc := range []struct {
		name    string
		faults  []history.Fault
		verdict string
		witness string // in the witness of an invalid verdict
	}{
		{"refused", []history.Fault{heal(&history.LostVoterOutcome{Via: join, Refused: true}), heal(&history.LostVoterOutcome{Via: boot, Refused: true})}, Valid, ""},
		{"ran as a member after --join", []history.Fault{heal(&history.LostVoterOutcome{Via: boot, Refused: true}), heal(&history.LostVoterOutcome{Via: join, Served: true})}, Invalid, "with --join,"},
		{"a founder ran as a member after --bootstrap", []history.Fault{heal(&history.LostVoterOutcome{Via: join, Refused: true}), heal(&history.LostVoterOutcome{Via: boot, Served: true})}, Invalid, "with its founding --bootstrap list,"},
		{"a founder ran as a member after --bootstrap with every other node down", []history.Fault{heal(&history.LostVoterOutcome{Via: alone, Served: true})}, Invalid, "while every other node was down"},
		{"ran as a member, no via recorded", []history.Fault{heal(&history.LostVoterOutcome{Served: true})}, Invalid, "with --join,"},
		{"neither", []history.Fault{heal(&history.LostVoterOutcome{Via: boot})}, history.Unknown, ""},
		{"no fault", []history.Fault{{Phase: "heal", Kind: history.NemStorage, Storage: &history.StorageOutcome{Index: 3, Served: true}}}, history.Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckLostVoterRefused(tc.faults)
			if r.Verdict != tc.verdict || (tc.verdict == Invalid) != (r.Anomaly == AnomalyLostVoterServed) {
				t.Fatalf("got %s %s (%s), want %s", r.Verdict, r.Anomaly, r.Witness, tc.verdict)
			}
			if !strings.Contains(r.Witness, tc.witness) {
				t.Errorf("witness %q does not say %q", r.Witness, tc.witness)
			}
		})
	}
}
