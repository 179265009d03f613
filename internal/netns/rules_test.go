package netns

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// recordingRules returns Rules whose commands append their iptables
// arguments to a file instead of running iptables, and a function that
// reads them back.
func recordingRules(t *testing.T) (Rules, func() []string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "cmds")
	r := Rules{
		IDs: []string{"a", "b"},
		IP:  map[string]string{"a": "10.0.0.11", "b": "10.0.0.12"},
		In: func(id string) ([]string, error) {
			if id == "down" {
				return nil, errors.New("down is not running")
			}
			// $1 is IptablesBin; record the node and the rest.
			return []string{"sh", "-c", `shift; echo "` + id + `: $*" >> ` + log, "sh"}, nil
		},
	}
	return r, func() []string {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

func TestRulesPartitionFlushesEveryNodeAndIgnoresSelfGrudge(t *testing.T) {
	r, cmds := recordingRules(t)
	placed, err := r.Partition(map[string][]string{"b": {"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{"b": {"a"}}; !reflect.DeepEqual(placed, want) {
		t.Fatalf("placed %v, want %v", placed, want)
	}
	want := []string{"a: -F LFJ-PART", "b: -F LFJ-PART", "b: -A LFJ-PART -s 10.0.0.11 -j DROP"}
	if got := cmds(); !reflect.DeepEqual(got, want) {
		t.Fatalf("commands\n%q\nwant\n%q", got, want)
	}
}

func TestRulesFlakyResetsSynsWithPAndOtherPacketsWithPOver100(t *testing.T) {
	r, cmds := recordingRules(t)
	if err := r.Flaky(0.5); err != nil {
		t.Fatal(err)
	}
	got := cmds()
	if len(got) != 6 || got[0] != "a: -F LFJ-FLAKY" ||
		got[1] != "a: -A LFJ-FLAKY -s 10.0.0.12 -p tcp --syn -m statistic --mode random --probability 0.5000 -j REJECT --reject-with tcp-reset" ||
		got[2] != "a: -A LFJ-FLAKY -s 10.0.0.12 -p tcp -m statistic --mode random --probability 0.00500 -j REJECT --reject-with tcp-reset" {
		t.Fatalf("commands %q", got)
	}
}

func TestRulesRefusedNodeIsAnErrorAndCountsNothing(t *testing.T) {
	r, _ := recordingRules(t)
	r.IDs = []string{"down"}
	if err := r.Silence("down", true); err == nil {
		t.Fatal("silence of a node In refuses succeeded")
	}
	if s := r.Stats(); len(s.Held) != 0 || s.Reset != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFlakyStringIsEmptyWithoutFlakiness(t *testing.T) {
	if s := FlakyString(0); s != "" {
		t.Fatalf("FlakyString(0) = %q", s)
	}
	if s, want := FlakyString(0.5), "; flaky: peer SYNs reset with p=0.50, other peer packets with p=0.0050"; s != want {
		t.Fatalf("FlakyString(0.5) = %q, want %q", s, want)
	}
}
