package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
)

// saveBackup streams a backup from node i into a file, as leasectl does.
func saveBackup(t *testing.T, tc *testCluster, i int) string {
	t.Helper()
	s, err := tc.admin(i).Snapshot(ctxT(t), &api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backup.lfb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for {
		c, err := s.Recv()
		if err == io.EOF {
			return path
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(c.Data); err != nil {
			t.Fatal(err)
		}
	}
}

// Grant tokens, back up, grant more, lose the whole cluster, restore a new
// one from the backup: the next grant beats every token ever issued. The
// epoch here is EpochBase (its line is 0): the bump decides. With the bump
// forced to zero, it would not: that is what the bump is for (and, at a
// real epoch, the line).
func TestRestoreFromBackupBumpsTokensAboveEveryTokenIssued(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	c := tc.client(1) // a follower or the leader: Snapshot is forwarded
	cycle := func(c api.LeaseServiceClient, resource string) uint64 { return grantAndRelease(ctx, t, c, resource) }
	for i := 0; i < 3; i++ {
		cycle(c, "jobs/1")
	}
	held, err := c.Acquire(ctx, acquireReq("jobs/held", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	backup := saveBackup(t, tc, 2)
	var highest uint64
	for i := 0; i < 3; i++ {
		highest = cycle(c, "jobs/1") // tokens 4..6, after the backup
	}
	cycle(c, "ops/new") // a scope the backup never saw: token 1
	tc.close()          // the cluster is lost

	restore := func(tweak func(*Config)) *testCluster {
		return newTestCluster(t, 3, func(cfg *Config) {
			cfg.RestoreFrom, cfg.RestoreEpoch = backup, EpochBase // its line is 0: the bump decides
			if tweak != nil {
				tweak(cfg)
			}
		})
	}
	nc := restore(nil)
	// Get's scope token is what the next grant exceeds, in every scope.
	for _, res := range []string{"jobs/1", "ops/new"} {
		if g, err := nc.client(1).Get(ctx, &api.GetRequest{Resource: res}); err != nil || g.ScopeToken != 3+DefaultBumpTokens {
			t.Fatalf("after restore, Get %s: scope token %d, %v", res, g.GetScopeToken(), err)
		}
	}
	token := cycle(nc.client(0), "jobs/1")
	if token <= highest || token != 3+DefaultBumpTokens+1 {
		t.Fatalf("after restore token %d; highest ever issued %d", token, highest)
	}
	// Every scope, known to the backup or not, draws above the floor.
	if token := cycle(nc.client(2), "ops/new"); token != 3+DefaultBumpTokens+1 {
		t.Fatalf("after restore, a scope the backup never saw got token %d", token)
	}
	g, err := nc.client(1).Get(ctx, &api.GetRequest{Resource: "jobs/held"})
	if err != nil || g.Lease == nil || g.Lease.Token != held.Lease.Token {
		t.Fatalf("a lease in the backup was not restored: %v %v", g, err)
	}
	nc.close()

	zero := restore(func(cfg *Config) { cfg.AllowZeroBump = true })
	if token := cycle(zero.client(0), "jobs/1"); token != 4 {
		t.Fatalf("with no bump (and an epoch whose line is 0) the restored cluster grants token %d, want the reissued 4", token)
	}
}

func TestRestoreRefusesAlteredBackup(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	backup := saveBackup(t, tc, 0)
	data, _ := os.ReadFile(backup)
	data[len(data)/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.lfb")
	os.WriteFile(bad, data, 0o600)
	cfg := tc.cfgs[0]
	cfg.DataDir, cfg.RestoreFrom, cfg.RestoreEpoch = t.TempDir(), bad, EpochBase
	cfg.Listen = freeAddrs(t, 1)[0]
	cfg.Bootstrap = map[string]string{cfg.ID: cfg.Listen}
	if _, err := Start(cfg); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("altered backup: %v", err)
	}
}

// A bump above EpochTokens (it would let the floor pass a later restore's
// line; reviewer) refuses to start, says why, and leaves the data dir as
// it was: a second start with a sane bump restores from the same file.
// (A floor past 2^64-1 is fsm's TestRaiseFloorRefusesOverflowAndChangesNothing;
// a bump of at most 2^32 cannot reach it here.)
func TestRestoreRefusesABumpAboveTheEpochLineAndChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	if _, err := tc.client(0).Acquire(ctxT(t), acquireReq("jobs/of", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	backup := saveBackup(t, tc, 0)
	tc.close()

	cfg := tc.cfgs[0]
	cfg.DataDir, cfg.RestoreFrom, cfg.RestoreEpoch = t.TempDir(), backup, EpochBase
	cfg.Listen = freeAddrs(t, 1)[0]
	cfg.Bootstrap = map[string]string{cfg.ID: cfg.Listen}
	cfg.BumpTokens = EpochTokens + 1
	if n, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "--bump-tokens") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a bump above %d: %v, want a refusal naming --bump-tokens", EpochTokens, err)
	}
	cfg.BumpTokens = 0 // the default
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("second start with the default bump: %v", err)
	}
	defer n.Close()
	var r *api.AcquireResponse
	eventually(t, 10*time.Second, "a grant from the restored node", func() bool {
		r, err = n.LeaseServer().Acquire(ctxT(t), acquireReq("ops/new", 10*time.Second))
		return err == nil
	})
	if r.Lease.Token != 1+DefaultBumpTokens+1 {
		t.Fatalf("token after the restore: %d", r.Lease.Token)
	}
}

// Founding nodes restored with another token bump (or from another backup
// file) than the rest get another cluster id, and the rest refuse their Raft
// RPCs: the odd node neither votes nor replicates, so it can never lead
// and grant below the floor of the others. Before cluster ids were checked
// on Raft RPCs, the odd node followed (and could lead) the others.
func TestFoundingNodesRestoredDifferentlyNeverFormOneCluster(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	if _, err := tc.client(0).Acquire(ctx, acquireReq("jobs/1", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	backup := saveBackup(t, tc, 0)
	tc.close()

	nc := newTestCluster(t, 3, func(cfg *Config) {
		cfg.RestoreFrom, cfg.RestoreEpoch = backup, EpochBase
		if cfg.ID == "n3" {
			cfg.BumpTokens = 10 // the odd one: a smaller bump
		}
	})
	if li, _ := nc.leader(); li == 2 {
		t.Fatal("the node restored with another bump leads")
	}
	if a, b := nc.nodes[0].ClusterID(), nc.nodes[2].ClusterID(); a == b || a == "" {
		t.Fatalf("cluster ids %q and %q: a different bump must give a different id", a, b)
	}
	c := nc.client(0)
	var token uint64
	for i := 0; i < 5; i++ {
		r, err := c.Acquire(ctx, acquireReq(fmt.Sprintf("jobs/%d", i+2), 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		token = r.Lease.Token
	}
	if token <= DefaultBumpTokens {
		t.Fatalf("token %d is not above the floor of the default bump", token)
	}
	_, leader := nc.leader()
	want := leader.AppliedIndex()
	eventually(t, 10*time.Second, "the other good node applies the grants", func() bool {
		return nc.nodes[1].AppliedIndex() >= want
	})
	// A few election and heartbeat rounds: the odd node stays outside.
	time.Sleep(2 * time.Second)
	if got := nc.nodes[2].AppliedIndex(); got >= want {
		t.Fatalf("the node restored with another bump applied index %d of the others' %d: it replicates their log", got, want)
	}
	if nc.nodes[2].IsLeader() {
		t.Fatal("the odd node leads")
	}

	// A founding node whose first start stopped after the seed but before
	// it wrote its identity file (the file removed stands for that) keeps
	// the restored cluster's id: it was recorded before the seed.
	wantID := nc.nodes[1].ClusterID()
	nc.stop(0)
	if err := os.Remove(filepath.Join(nc.cfgs[0].DataDir, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	nc.start(0)
	if got := nc.nodes[0].ClusterID(); got != wantID {
		t.Fatalf("restarted before its identity file, the node has cluster id %q, not the restored cluster's %q", got, wantID)
	}
}

// A restored cluster is lost before anyone backs it up, and the operator
// restores again from the only backup there is. The floor was the
// backup's highest token plus the bump, the same for both restores: the
// second reissued the first one's tokens (4294967298 after 4294967300).
// Each restore now has its epoch (when it began), and its floor is at
// least EpochTokens per second of it: the later restore beats the
// earlier's.
func TestRestoringOneBackupTwiceNeverReissuesTokens(t *testing.T) {
	issued, got, firstID, secondID := restoreOneBackupTwice(t, nil)
	if got <= issued {
		t.Fatalf("the second restore of the backup granted token %d; the first restored cluster had granted up to %d", got, issued)
	}
	if firstID == secondID { // their bootstrap lists differ here too; TestANodeLeftFrom... keeps one
		t.Fatalf("two restores of one backup share the cluster id %s", firstID)
	}
}

// restoreOneBackupTwice backs up a cluster, restores it (epoch e), grants
// three times in a scope, loses it, restores the same file again (epoch
// e+1, every node through tweak), and returns the highest token the first
// restored cluster granted, the second's first token in that scope, and
// the two clusters' ids.
func restoreOneBackupTwice(t *testing.T, tweak func(*Config)) (issued, got uint64, firstID, secondID string) {
	ctx := ctxT(t)
	backup := lostClusterBackup(t)

	cycle := func(c api.LeaseServiceClient, resource string) uint64 { return grantAndRelease(ctx, t, c, resource) }
	const first = testEpoch
	restore := func(epoch uint64) *testCluster {
		return newTestCluster(t, 3, func(cfg *Config) {
			cfg.RestoreFrom, cfg.RestoreEpoch = backup, epoch
			if tweak != nil {
				tweak(cfg)
			}
		})
	}
	c1 := restore(first)
	for range 3 {
		issued = cycle(c1.client(0), "ops/x")
	}
	firstID = c1.nodes[0].ClusterID()
	c1.close() // lost too, never backed up

	c2 := restore(first + 1)
	return issued, cycle(c2.client(0), "ops/x"), firstID, c2.nodes[0].ClusterID()
}

// A node of an earlier restore of the same backup whose data dir was not
// emptied, started again among the founders of a later restore (the same
// file, bump and bootstrap list), had the same cluster id and mixed the
// two clusters' logs. With the epoch in the id, the others refuse it.
func TestANodeLeftFromAnEarlierRestoreNeverJoinsALaterOne(t *testing.T) {
	ctx := ctxT(t)
	backup := lostClusterBackup(t)

	const first = testEpoch
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.RestoreFrom, cfg.RestoreEpoch = backup, first })
	for i := range 5 {
		if _, err := c.client(0).Acquire(ctx, acquireReq(fmt.Sprintf("c1/%d", i), 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitAllApplied(t)
	c.close()
	// Restored again: n1's and n2's data dirs emptied, n3's forgotten.
	for i := range c.cfgs {
		c.cfgs[i].RestoreEpoch = first + 60
	}
	c.cfgs[0].DataDir, c.cfgs[1].DataDir = t.TempDir(), t.TempDir()
	c.start(0)
	c.start(1)
	// Two founders of three do not form a cluster (they hold their votes:
	// with one of them wiped they could not tell it from a cluster that
	// formed without them); the leftover n3 answering with the earlier
	// restore's cluster id shows it holds none of this one's log.
	c.start(2)
	c.leader()
	if _, err := c.client(0).Acquire(ctx, acquireReq("c2/y", 10*time.Second)); err != nil {
		if _, err := c.client(1).Acquire(ctx, acquireReq("c2/y", 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := c.nodes[0].ClusterID(), c.nodes[2].ClusterID(); a == b {
		t.Fatalf("the leftover node has the later restore's cluster id %s", a)
	}
	_, leader := c.leader()
	want := leader.AppliedIndex()
	time.Sleep(2 * time.Second) // election and heartbeat rounds
	if got := c.nodes[2].AppliedIndex(); got >= want || c.nodes[2].IsLeader() {
		t.Fatalf("the leftover node applied %d of the new cluster's %d (leads: %v): it joined it", got, want, c.nodes[2].IsLeader())
	}
}

// grantAndRelease acquires resource through c, releases it, and returns
// the grant's token.
func grantAndRelease(ctx context.Context, t *testing.T, c api.LeaseServiceClient, resource string) uint64 {
	t.Helper()
	r, err := c.Acquire(ctx, acquireReq(resource, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	return r.Lease.Token
}

// A fall back to an older backup after a chain of restores: restore X,
// grant, back up that cluster as Y, restore Y, grant, lose it, restore X
// again. A floor that added the epoch's share on top of the backup's
// tokens piled it up along the chain, and X's second restore came out
// below Y's cluster's tokens (reviewer). The epoch is a line the floor
// reaches, not an increment: later restores beat earlier ones, whatever
// they restored.
func TestAnOlderBackupRestoredAfterAChainBeatsItsTokens(t *testing.T) {
	ctx := ctxT(t)
	x := lostClusterBackup(t)
	restore := func(file string, epoch uint64) *testCluster {
		return newTestCluster(t, 3, func(cfg *Config) { cfg.RestoreFrom, cfg.RestoreEpoch = file, epoch })
	}
	const first = testEpoch
	b1 := restore(x, first)
	grantAndRelease(ctx, t, b1.client(0), "ops/x")
	y := saveBackup(t, b1, 0)
	b1.close()
	b2 := restore(y, first+1)
	var issued uint64
	for range 3 {
		issued = grantAndRelease(ctx, t, b2.client(0), "ops/x")
	}
	b2.close()
	b3 := restore(x, first+2)
	if got := grantAndRelease(ctx, t, b3.client(0), "ops/x"); got <= issued {
		t.Fatalf("the older backup restored after the chain granted token %d; the chain's last cluster had granted up to %d", got, issued)
	}
}

// The epoch is required where a restore seeds a data dir, and only there:
// a first start without it is refused and changes nothing (a start with it
// then restores), and a restart over a seeded data dir ignores --restore
// as before, with or without an epoch: a cluster restored before epochs,
// its unit files still carrying --restore, keeps starting.
func TestTheRestoreEpochIsRequiredOnlyToSeed(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	backup := saveBackup(t, tc, 0)
	tc.close()
	cfg := tc.cfgs[0]
	cfg.DataDir, cfg.RestoreFrom, cfg.RestoreEpoch = t.TempDir(), backup, 0
	cfg.Listen = freeAddrs(t, 1)[0]
	cfg.Bootstrap = map[string]string{cfg.ID: cfg.Listen}
	if n, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "--restore-epoch") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("a restore without its epoch: %v, want a refusal naming --restore-epoch", err)
	}
	cfg.RestoreEpoch = EpochBase
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("then with the epoch: %v", err)
	}
	id := n.ClusterID()
	n.Close()
	cfg.RestoreEpoch = 0 // a restart: the data dir is seeded
	n, err = Start(cfg)
	if err != nil {
		t.Fatalf("a restart over the restored data dir without the epoch: %v", err)
	}
	defer n.Close()
	if n.ClusterID() != id {
		t.Fatalf("the restart changed the cluster id from %s to %s", id, n.ClusterID())
	}
}

// A restore whose epoch is not later than the restore its backup descends
// from (a clock behind, an epoch reused) is refused: the line would not
// beat that restore's cluster. A later epoch restores.
func TestARestoreAtAnEpochNotLaterThanItsBackupsIsRefused(t *testing.T) {
	ctx := ctxT(t)
	x := lostClusterBackup(t)
	const first = testEpoch
	b := newTestCluster(t, 1, func(cfg *Config) { cfg.RestoreFrom, cfg.RestoreEpoch = x, first })
	grantAndRelease(ctx, t, b.client(0), "ops/x")
	y := saveBackup(t, b, 0)
	b.close()
	cfg := b.cfgs[0]
	cfg.DataDir, cfg.RestoreFrom = t.TempDir(), y
	cfg.Listen = freeAddrs(t, 1)[0]
	cfg.Bootstrap = map[string]string{cfg.ID: cfg.Listen}
	for _, epoch := range []uint64{first - 60, first} {
		cfg.RestoreEpoch = epoch
		if n, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "descends from a restore at this epoch or later") {
			if n != nil {
				n.Close()
			}
			t.Fatalf("a restore of a backup of the epoch-%d restore at epoch %d: %v, want a refusal", first, epoch, err)
		}
	}
	cfg.RestoreEpoch = first + 1
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("at a later epoch: %v", err)
	}
	n.Close()
}

// testEpoch is a restore epoch of the tests (2025-12-03).
const testEpoch = 1_764_800_000

// lostClusterBackup runs a three-node cluster, grants once in jobs/1,
// backs it up and loses it; it returns the backup file.
func lostClusterBackup(t *testing.T) string {
	t.Helper()
	tc := newTestCluster(t, 3, nil)
	if _, err := tc.client(0).Acquire(ctxT(t), acquireReq("jobs/1", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	backup := saveBackup(t, tc, 0)
	tc.close()
	return backup
}
