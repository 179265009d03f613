//go:build plantedbugs

package e2e

import (
	"testing"

	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/internal/planted"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// The restore check with real processes must catch issue 13's restore:
// with restore-bumps-known-scopes planted in every leased, a scope first
// used after the backup reissues a token from before the loss.
func TestRestoreCheckCatchesRestoreBumpsKnownScopes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	bin, cleanup, err := testcluster.BuildWith("-tags", "plantedbugs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	t.Setenv(planted.Env, fsm.BugRestoreBumpsKnownScopes) // inherited by every leased
	v, _ := restoreAfterLoss(t, testcluster.Start(t, bin, 3))
	if len(v) == 0 {
		t.Fatalf("planted %s: the restore check saw nothing", fsm.BugRestoreBumpsKnownScopes)
	}
	t.Logf("caught: %v", v)
}
