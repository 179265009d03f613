package fencesql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencesql"
)

// BenchmarkSQLiteWrite compares one committed SQLite transaction (WAL,
// synchronous=FULL) that upserts a row, with and without the fence check in
// it.
//
//	go test -run '^$' -bench SQLiteWrite -benchtime 2000x ./fence/fencesql/
func BenchmarkSQLiteWrite(b *testing.B) {
	ctx := context.Background()
	setup := func(b *testing.B) (*sql.DB, *fencesql.Guard) {
		db := sqliteBackend().open(b)
		if _, err := db.ExecContext(ctx, "PRAGMA synchronous=FULL"); err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		g, err := fencesql.New(fencesql.SQLite)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.CreateSchema(ctx, db); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		return db, g
	}
	const upsert = "INSERT INTO accounts (id, balance) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance"
	b.Run("unfenced", func(b *testing.B) {
		db, _ := setup(b)
		for i := 0; b.Loop(); i++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, upsert, "account/7", i); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		db, g := setup(b)
		for i := 0; b.Loop(); i++ {
			tok := fence.Token{Scope: "account/7", Value: uint64(1 + i/8)}
			if err := g.Update(ctx, db, nil, tok, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, upsert, "account/7", i)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
