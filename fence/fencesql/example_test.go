package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	_ "modernc.org/sqlite"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencesql"
)

func ExampleGuard_Update() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	guard, err := fencesql.New(fencesql.SQLite)
	if err != nil {
		panic(err)
	}
	if err := guard.CreateSchema(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)`); err != nil {
		panic(err)
	}
	setBalance := func(tok uint64, balance int) error {
		return guard.Update(ctx, db, nil, fence.Token{Scope: "account/7", Value: tok}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (7, ?)
				ON CONFLICT (id) DO UPDATE SET balance = excluded.balance`, balance)
			return err
		})
	}
	fmt.Println(setBalance(72, 50))
	err = setBalance(71, 100)
	var stale *fence.StaleTokenError
	fmt.Println(errors.As(err, &stale), stale.Highest)
	var balance int
	_ = db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 7`).Scan(&balance)
	fmt.Println(balance)
	// Output:
	// <nil>
	// true 72
	// 50
}
