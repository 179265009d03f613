package history

import (
	"encoding/json"
	"fmt"
	"strings"
)

// StorageOutcome is what a node did after NemStorage changed its log
// (raft.db or wal) or its newest snapshot.
type StorageOutcome struct {
	// Index is the entry whose body was changed, or the last index of the
	// snapshot that was (0: nothing found to change).
	Index uint64 `json:"index"`
	// Snapshot names the snapshot changed ("": an entry in its log, raft.db
	// or wal).
	Snapshot string `json:"snapshot,omitempty"`
	// SetAside: the node logged that it will not restore the changed
	// snapshot (and started from an older one and its log).
	SetAside bool `json:"set_aside,omitempty"`
	// Refused: the process exited saying the store is corrupt.
	Refused bool `json:"refused,omitempty"`
	// Fenced: it runs but reports its state corrupt (serves nothing).
	Fenced bool `json:"fenced,omitempty"`
	// Served: it ran, answered status with an applied index at or past
	// Index, and did neither of the above.
	Served bool `json:"served,omitempty"`
}

// How NemLostVoter started the node again (LostVoterOutcome.Via).
const (
	// LostVoterViaJoin: with --join through a running node.
	LostVoterViaJoin = "join"
	// LostVoterViaBootstrap: with the --bootstrap list the cluster was
	// founded with (a founder only).
	LostVoterViaBootstrap = "bootstrap"
	// LostVoterViaBootstrapAlone: with the founding --bootstrap list while
	// every other node was down (a whole-site outage that also cost it
	// its disk), the others started again 2 s later: it finds no one to
	// ask, holds its votes, and must stop once they answer.
	LostVoterViaBootstrapAlone = "bootstrap-alone"
)

// LostVoterOutcome is what a voter did when started again on an empty
// data dir under its old id, not removed (NemLostVoter).
type LostVoterOutcome struct {
	// Via is how it was started: LostVoterViaJoin,
	// LostVoterViaBootstrap or LostVoterViaBootstrapAlone ("": a run from
	// before the bootstrap variant, always --join).
	Via string `json:"via,omitempty"`
	// Refused: the process exited saying its data was lost (it is a
	// voter already): before it ran raft, or, started alone
	// (LostVoterViaBootstrapAlone), while it held its votes.
	Refused bool `json:"refused,omitempty"`
	// Served: it ran as a member (its status answered with a term, its
	// votes not held).
	Served bool `json:"served,omitempty"`
}

// MemberAdd is one add NemMemberUnreachable asked for.
type MemberAdd struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Answer string `json:"answer"`
	Error  string `json:"error,omitempty"`
	TookNs int64  `json:"took_ns"`
}

// MembershipOutcome is what NemMemberUnreachable saw (on its heal record).
type MembershipOutcome struct {
	Adds []MemberAdd `json:"adds"`
	// Voters lists "node: id at addr" for every unreachable member a node
	// listed as a voter, during the hold or after the heal.
	Voters []string `json:"voters,omitempty"`
	// Left lists "node: id at addr" for every unreachable member a node
	// still listed (voter or not) once the heal was over.
	Left []string `json:"left,omitempty"`
}

// ReadFaults reads a nemesis.jsonl.
func ReadFaults(b []byte) ([]Fault, error) {
	var out []Fault
	for i, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var f Fault
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			return out, fmt.Errorf("nemesis line %d: %w", i+1, err)
		}
		out = append(out, f)
	}
	return out, nil
}
