//go:build plantedbugs

package cluster

import "testing"

// The planted lost-voter-unchecked asks nobody: the lost voter starts.
func TestPlantedLostVoterUncheckedStartsALostVoter(t *testing.T) {
	_, _, n, err := startLostVoter(t, func(c *Config) { c.Testing.PlantedBugs = []string{BugLostVoterUnchecked} })
	if err != nil {
		t.Fatalf("planted %s: the lost voter was refused (%v): not the defect", BugLostVoterUnchecked, err)
	}
	n.Close()
}

// The planted lost-founder-unchecked asks nobody: the lost founder starts.
func TestPlantedLostFounderUncheckedStartsALostFounder(t *testing.T) {
	_, _, n, err := startLostFounder(t, func(c *Config) { c.Testing.PlantedBugs = []string{BugLostFounderUnchecked} })
	if err != nil {
		t.Fatalf("planted %s: the lost founder was refused (%v): not the defect", BugLostFounderUnchecked, err)
	}
	n.Close()
}

// The planted founder-votes-unheld takes a wiped founder that finds no
// one to ask for a founder of a forming cluster: it votes at once.
func TestPlantedFounderVotesUnheldVotesAtOnce(t *testing.T) {
	_, _, n := startLostFounderAlone(t, func(c *Config) { c.Testing.PlantedBugs = []string{BugFounderVotesUnheld} })
	if n.tr.VotesHeld() {
		t.Fatalf("planted %s: the lost founder holds its votes: not the defect", BugFounderVotesUnheld)
	}
}
