package fencebolt_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
)

func ExampleGuard_Update() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "app.db"), 0o600, nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	guard, err := fencebolt.New(db)
	if err != nil {
		panic(err)
	}
	put := func(tok uint64, balance string) error {
		return guard.Update(fence.Token{Scope: "account/7", Value: tok}, func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("accounts"))
			if err != nil {
				return err
			}
			return b.Put([]byte("7"), []byte(balance))
		})
	}
	fmt.Println(put(72, "50"))
	err = put(71, "100")
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	// Output:
	// <nil>
	// true
}
