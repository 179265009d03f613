package fencebolt_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
	"github.com/leasefence/leasefence/fence/internal/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openDB(t testing.TB, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func logBucket(scope string) []byte { return []byte("log/" + scope) }

// appendLog is the effect of the suite: the token goes into a per-scope
// bucket under the next sequence number.
func appendLog(tx *bolt.Tx, tok fence.Token) error {
	b, err := tx.CreateBucketIfNotExists(logBucket(tok.Scope))
	if err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	var k, v [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	binary.BigEndian.PutUint64(v[:], tok.Value)
	return b.Put(k[:], v[:])
}

func readLog(t *testing.T, db *bolt.DB, scope string) []uint64 {
	t.Helper()
	var out []uint64
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(logBucket(scope))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			out = append(out, binary.BigEndian.Uint64(v))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBoltGuard(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, rule fence.Rule) fencetest.Subject {
		db := openDB(t, filepath.Join(t.TempDir(), "fence.db"))
		g, err := fencebolt.New(db, fencebolt.WithRule(rule))
		if err != nil {
			t.Fatal(err)
		}
		return fencetest.Subject{
			Write: func(ctx context.Context, tok fence.Token, fail, panics bool) error {
				return g.Update(tok, func(tx *bolt.Tx) error {
					if err := appendLog(tx, tok); err != nil {
						return err
					}
					if panics {
						panic("effect panicked")
					}
					if fail {
						return fencetest.ErrEffect
					}
					return nil
				})
			},
			Log: func(t *testing.T, scope string) []uint64 { return readLog(t, db, scope) },
			Highest: func(t *testing.T, scope string) uint64 {
				h, err := g.Highest(scope)
				if err != nil {
					t.Fatal(err)
				}
				return h
			},
			// Every bbolt commit is an fsync; keep the run short.
			Workers: 8, Writes: 25,
		}
	})
}

// The record survives closing and reopening the file, and a stale token is
// still refused afterwards.
func TestBoltGuardRecordSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := fencebolt.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(fence.Token{Scope: "s", Value: 9}, func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	g, err = fencebolt.New(openDB(t, path))
	if err != nil {
		t.Fatal(err)
	}
	err = g.Update(fence.Token{Scope: "s", Value: 8}, func(*bolt.Tx) error { t.Error("stale effect ran"); return nil })
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("after reopen: %v, want ErrStaleToken", err)
	}
}

// A refusal writes nothing, so the caller may commit an audit record in the
// same transaction while the effect stays out.
func TestBoltCheckRefusalLeavesTransactionUsable(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "fence.db"))
	g, err := fencebolt.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(fence.Token{Scope: "s", Value: 5}, func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var stale error
	if err := db.Update(func(tx *bolt.Tx) error {
		stale = g.Check(tx, fence.Token{Scope: "s", Value: 4})
		b, err := tx.CreateBucketIfNotExists([]byte("audit"))
		if err != nil {
			return err
		}
		return b.Put([]byte("1"), []byte("refused 4"))
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(stale, fence.ErrStaleToken) {
		t.Fatalf("Check = %v, want ErrStaleToken", stale)
	}
	if h, _ := g.Highest("s"); h != 5 {
		t.Fatalf("highest = %d, want 5", h)
	}
}

func TestBoltGuardRefusesCorruptRecord(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "fence.db"))
	g, err := fencebolt.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(fencebolt.DefaultBucket)).Put([]byte("s"), []byte{1, 2, 3})
	}); err != nil {
		t.Fatal(err)
	}
	err = g.Update(fence.Token{Scope: "s", Value: 1}, func(*bolt.Tx) error { t.Error("effect ran over a corrupt record"); return nil })
	if err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("corrupt record: error = %v, want a corruption error", err)
	}
}
