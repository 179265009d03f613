//go:build plantedbugs

package fencekv_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasefence/leasefence/fence/fencekv"
)

// Planted bugs are per server: in one process, the server given
// accept-lower-token applies a stale write, the other refuses it.
func TestPlantedAcceptLowerTokenIsPerServer(t *testing.T) {
	ctx := context.Background()
	for _, bug := range []bool{true, false} {
		c, _ := startServer(t, func(cfg *fencekv.Config) {
			if bug {
				cfg.Testing.PlantedBugs = []string{fencekv.BugAcceptLowerToken}
			}
		})
		if _, err := c.Put(ctx, "k", tok("k", 72), []byte("from B")); err != nil {
			t.Fatal(err)
		}
		_, err := c.Put(ctx, "k", tok("k", 71), []byte("from A"))
		if got := err == nil; got != bug {
			t.Errorf("planted %v: stale write applied %v (%v)", bug, got, err)
		}
	}
}

func TestValidateRefusesAnUnknownPlantedBug(t *testing.T) {
	cfg := fencekv.DefaultConfig()
	cfg.DataFile = filepath.Join(t.TempDir(), "kv.db")
	cfg.Testing.PlantedBugs = []string{"no-such-bug"}
	if err := cfg.Validate(); err == nil {
		t.Fatal("unknown planted bug accepted")
	}
	k, unknown := fencekv.PlantedKnobs([]string{fencekv.BugAcceptLowerToken, "no-such-bug"})
	if len(k.PlantedBugs) != 1 || len(unknown) != 1 {
		t.Fatalf("PlantedKnobs: %+v %v", k, unknown)
	}
}
