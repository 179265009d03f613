package fencebolt_test

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
)

// BenchmarkBoltWrite compares one durable write (a bbolt transaction with
// fsync on commit) with and without the fence check and record in it.
//
//	go test -run '^$' -bench BoltWrite -benchtime 2000x ./fence/fencebolt/
func BenchmarkBoltWrite(b *testing.B) {
	value := []byte("balance=100")
	effect := func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("kv"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("account/7"), value)
	}
	b.Run("unfenced", func(b *testing.B) {
		db := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
		for i := 0; b.Loop(); i++ {
			if err := db.Update(effect); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		db := openDB(b, filepath.Join(b.TempDir(), "bench.db"))
		g, err := fencebolt.New(db)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			tok := fence.Token{Scope: "account/7", Value: uint64(1 + i/8)}
			if err := g.Update(tok, effect); err != nil {
				b.Fatal(err)
			}
		}
	})
}
