package nemesis

import "testing"

func TestParseNemeses(t *testing.T) {
	// "all" is every nemesis but the out-of-spec clock-rate and
	// clock-rate-client-pause, the two restores, the two drift-edge
	// ones (which set up the whole run) and lose-tail (its watch gaps).
	if ks, err := ParseNemeses("all"); err != nil || len(ks) != len(AllNemeses)-7 {
		t.Fatal(ks, err)
	}
	if _, err := ParseNemeses("kill,partition"); err == nil {
		t.Fatal("unknown nemesis accepted")
	}
}
