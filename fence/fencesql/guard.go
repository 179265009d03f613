// Package fencesql fences rows of a SQL database through database/sql: one
// conditional statement, run inside the caller's transaction, compares the
// token with the highest accepted in its scope and records it; the caller's
// effect goes into the same transaction, so the two commit or roll back
// together. It works on PostgreSQL (tested with github.com/jackc/pgx/v5's
// stdlib driver) and SQLite (tested with modernc.org/sqlite); the package
// itself imports no driver.
//
// The statement is an upsert into a small table of highest tokens (see
// Guard.Schema):
//
//	INSERT INTO fence_tokens AS f (scope, highest) VALUES ($1, $2)
//	ON CONFLICT (scope) DO UPDATE SET highest = excluded.highest
//	WHERE f.highest <= excluded.highest      -- '<' under fence.Strict
//
// It changes one row when the token is admitted and none when it is stale.
// Admitting writes the row even for an equal token, so the scope's row stays
// locked (PostgreSQL) or the database write-locked (SQLite) until the
// caller's transaction ends: a concurrent check of the same scope waits, and
// then sees the committed highest. That is what keeps effects of one scope
// in token order; it protects only what the effect reads after the check,
// in the same transaction (see Guard.Check).
//
// PostgreSQL: use READ COMMITTED (the default). Under REPEATABLE READ or
// SERIALIZABLE a concurrent check of the same scope fails with a
// serialization error (SQLSTATE 40001) that the caller must retry.
// SQLite: open the database with a busy timeout (e.g. _pragma=busy_timeout(5000))
// and, if the transaction reads before the check, with _txlock=immediate,
// so that concurrent writers wait instead of failing with SQLITE_BUSY.
package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/leasefence/leasefence/fence"
)

// DefaultTable is the table of highest tokens unless WithTable names another.
const DefaultTable = "fence_tokens"

// Dialect selects the SQL spelling (placeholders, column types).
type Dialect int

const (
	// Postgres is PostgreSQL 9.5 or later ($1 placeholders, BIGINT).
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or later (? placeholders, INTEGER).
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Execer is what the guard needs from a transaction: *sql.Tx satisfies it
// (and so do *sql.DB and *sql.Conn, but then the check commits on its own,
// apart from the effect: pass the transaction that carries the effect).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Guard holds the statements for one dialect, table and rule. It keeps no
// connection and no state: the highest tokens live in the table. Safe for
// concurrent use.
type Guard struct {
	dialect Dialect
	table   string
	rule    fence.Rule

	schema, check, read string
}

// Option configures a Guard.
type Option func(*Guard)

// WithRule sets the acceptance rule (default fence.AtLeast).
func WithRule(r fence.Rule) Option { return func(g *Guard) { g.rule = r } }

// WithTable names the table of highest tokens (default DefaultTable): a
// plain identifier, optionally schema-qualified ("app.fence_tokens").
func WithTable(name string) Option { return func(g *Guard) { g.table = name } }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// New returns a guard for dialect d.
func New(d Dialect, opts ...Option) (*Guard, error) {
	g := &Guard{dialect: d, table: DefaultTable}
	for _, o := range opts {
		o(g)
	}
	if !identRE.MatchString(g.table) {
		return nil, fmt.Errorf("%w: %q", ErrBadTable, g.table)
	}
	cmp := "<="
	if g.rule == fence.Strict {
		cmp = "<"
	}
	p1, p2, intType := "$1", "$2", "BIGINT"
	switch d {
	case Postgres:
	case SQLite:
		p1, p2, intType = "?", "?", "INTEGER"
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnknownDialect, d)
	}
	g.schema = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
		"\tscope   TEXT NOT NULL PRIMARY KEY,\n"+
		"\thighest %s NOT NULL CHECK (highest > 0)\n)", g.table, intType)
	g.check = fmt.Sprintf("INSERT INTO %s AS f (scope, highest) VALUES (%s, %s) "+
		"ON CONFLICT (scope) DO UPDATE SET highest = excluded.highest "+
		"WHERE f.highest %s excluded.highest", g.table, p1, p2, cmp)
	g.read = fmt.Sprintf("SELECT highest FROM %s WHERE scope = %s", g.table, p1)
	return g, nil
}

// Rule returns the guard's acceptance rule.
func (g *Guard) Rule() fence.Rule { return g.rule }

// Schema returns the CREATE TABLE IF NOT EXISTS statement for the table of
// highest tokens, for your migrations.
func (g *Guard) Schema() string { return g.schema }

// CheckStatement returns the one statement Check runs, for review and logs.
func (g *Guard) CheckStatement() string { return g.check }

// CreateSchema runs Schema on db.
func (g *Guard) CreateSchema(ctx context.Context, db Execer) error {
	if _, err := db.ExecContext(ctx, g.schema); err != nil {
		return fmt.Errorf("fencesql: create %s: %w", g.table, err)
	}
	return nil
}

// Check compares tok with the highest token of its scope and, if the rule
// admits it, records it, in one statement run on tx. Run it in the
// transaction that carries the effect, before the effect, and commit only
// if both succeed; any error means roll back. A refused token returns a
// *fence.StaleTokenError after reading the highest for the message; the
// statement itself changed nothing.
//
// Read the rows the effect depends on after Check, in the same
// transaction. Check's write on the scope's row is what makes effects of a
// scope wait for each other; a row read before it is not protected by that
// lock (under READ COMMITTED each statement sees what was committed when it
// started), so an effect of the same scope may commit between the read and
// Check, and a write computed from the read would overwrite it unseen.
func (g *Guard) Check(ctx context.Context, tx Execer, tok fence.Token) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	if tok.Value > math.MaxInt64 {
		return fmt.Errorf("%w (token %d)", ErrTokenRange, tok.Value)
	}
	res, err := tx.ExecContext(ctx, g.check, tok.Scope, int64(tok.Value))
	if err != nil {
		return fmt.Errorf("fencesql: check: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fencesql: check: %w", err)
	}
	if n == 1 {
		return nil
	}
	highest, err := g.Highest(ctx, tx, tok.Scope)
	if err != nil {
		return err
	}
	return &fence.StaleTokenError{Scope: tok.Scope, Presented: tok.Value, Highest: highest}
}

// Highest returns the highest token accepted in scope as seen by q, 0 if
// none.
func (g *Guard) Highest(ctx context.Context, q Execer, scope string) (uint64, error) {
	var h int64
	err := q.QueryRowContext(ctx, g.read, scope).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fencesql: read highest: %w", err)
	}
	return uint64(h), nil
}

// Update runs Check and effect in one transaction on db and commits only if
// both succeed; when Check or effect fails (or effect panics) it rolls back,
// so the token record never outlives a failed effect. effect runs after
// Check, so what it reads through tx is protected by the scope's lock (see
// Check); a value read before Update, outside tx, is not. opts may be nil.
//
// A failed Commit ("fencesql: commit: …") leaves the outcome unknown: the
// COMMIT may have reached the database and landed (effect and token both
// recorded) before the error, e.g. when the connection broke. Treat it as
// indeterminate, not as a refusal or a rollback: re-read before retrying.
func (g *Guard) Update(ctx context.Context, db *sql.DB, opts *sql.TxOptions, tok fence.Token, effect func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("fencesql: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := g.Check(ctx, tx, tok); err != nil {
		return err
	}
	if err := effect(tx); err != nil {
		return err
	}
	committed = true // after Commit, even a failed one, Rollback has nothing to do
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fencesql: commit: %w", err)
	}
	return nil
}
