package fencesql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	_ "modernc.org/sqlite"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencegrpc"
	"github.com/leasefence/leasefence/fence/fencehttp"
	"github.com/leasefence/leasefence/fence/fencesql"
	"github.com/leasefence/leasefence/fence/internal/fencetest"
)

// PostgresDSNEnv names the variable that hands the tests a PostgreSQL
// server (.ci/run starts one). Under CI=true its absence fails the tests.
const PostgresDSNEnv = "LEASEFENCE_TEST_POSTGRES_DSN"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as the *sql.DB;
		// each test closes its DB, but the goroutine may still be winding down.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// backend is one database the suite runs on.
type backend struct {
	dialect fencesql.Dialect
	open    func(t testing.TB) *sql.DB
	// logDDL creates the effect's table: a per-scope log in commit order.
	logDDL, logInsert, logSelect string
}

func sqliteBackend() backend {
	return backend{
		dialect: fencesql.SQLite,
		open: func(t testing.TB) *sql.DB {
			path := filepath.Join(t.TempDir(), "fence.sqlite")
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
		logDDL:    "CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, token INTEGER NOT NULL)",
		logInsert: "INSERT INTO %s (scope, token) VALUES (?, ?)",
		logSelect: "SELECT token FROM %s WHERE scope = ? ORDER BY id",
	}
}

func postgresBackend(t testing.TB) backend {
	dsn := os.Getenv(PostgresDSNEnv)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: under CI=true the PostgreSQL tests must run (.ci/run starts a server)", PostgresDSNEnv)
		}
		t.Skipf("%s not set (run .ci/run, or start PostgreSQL and set it)", PostgresDSNEnv)
	}
	return backend{
		dialect: fencesql.Postgres,
		open: func(t testing.TB) *sql.DB {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := db.PingContext(context.Background()); err != nil {
				t.Fatalf("postgres at %s: %v", dsn, err)
			}
			return db
		},
		logDDL:    "CREATE TABLE %s (id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, token BIGINT NOT NULL)",
		logInsert: "INSERT INTO %s (scope, token) VALUES ($1, $2)",
		logSelect: "SELECT token FROM %s WHERE scope = $1 ORDER BY id",
	}
}

// subject builds a guard with fresh tables (unique names, dropped at the
// end) on b.
func (b backend) subject(t *testing.T, rule fence.Rule) (fencetest.Subject, *fencesql.Guard, *sql.DB) {
	db := b.open(t)
	db.SetMaxOpenConns(8)
	ctx := context.Background()
	table, logTable := fencetest.Name("fence_tokens"), fencetest.Name("fence_log")
	g, err := fencesql.New(b.dialect, fencesql.WithRule(rule), fencesql.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(b.logDDL, logTable)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.ExecContext(ctx, "DROP TABLE "+table)
		db.ExecContext(ctx, "DROP TABLE "+logTable)
	})
	insert, sel := fmt.Sprintf(b.logInsert, logTable), fmt.Sprintf(b.logSelect, logTable)
	s := fencetest.Subject{
		Write: func(ctx context.Context, tok fence.Token, fail, panics bool) error {
			return g.Update(ctx, db, nil, tok, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, insert, tok.Scope, int64(tok.Value)); err != nil {
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
		Log: func(t *testing.T, scope string) []uint64 {
			rows, err := db.QueryContext(ctx, sel, scope)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []uint64
			for rows.Next() {
				var v int64
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				out = append(out, uint64(v))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
		Highest: func(t *testing.T, scope string) uint64 {
			h, err := g.Highest(ctx, db, scope)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		Workers: 12, Writes: 30,
	}
	return s, g, db
}

func TestSQLiteGuard(t *testing.T) {
	b := sqliteBackend()
	fencetest.Run(t, func(t *testing.T, rule fence.Rule) fencetest.Subject {
		s, _, _ := b.subject(t, rule)
		return s
	})
}

func TestPostgresGuard(t *testing.T) {
	b := postgresBackend(t)
	fencetest.Run(t, func(t *testing.T, rule fence.Rule) fencetest.Subject {
		s, _, _ := b.subject(t, rule)
		return s
	})
}

// Both orders of a caller's own transaction: the check rolled back with the
// caller's rollback, and a refusal that changed nothing.
func TestCheckInsideCallersTransaction(t *testing.T) {
	backends := map[string]func(t *testing.T) backend{
		"sqlite":   func(*testing.T) backend { return sqliteBackend() },
		"postgres": func(t *testing.T) backend { return postgresBackend(t) },
	}
	for name, mk := range backends {
		t.Run(name, func(t *testing.T) {
			_, g, db := mk(t).subject(t, fence.AtLeast)
			ctx := context.Background()
			tok := fence.Token{Scope: "orders/7", Value: 3}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Check(ctx, tx, tok); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if h, _ := g.Highest(ctx, db, tok.Scope); h != 0 {
				t.Fatalf("highest = %d after the caller rolled back, want 0", h)
			}
			if err := g.Update(ctx, db, nil, fence.Token{Scope: "orders/7", Value: 4}, func(*sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var st *fence.StaleTokenError
			if err := g.Check(ctx, tx, tok); !errors.As(err, &st) || st.Highest != 4 || st.Presented != 3 {
				t.Fatalf("Check(3) after 4 = %v, want stale with highest 4", err)
			}
		})
	}
}

func TestNewRefusesBadTableAndHugeToken(t *testing.T) {
	for _, name := range []string{"", "fence tokens", "x; DROP TABLE y", "a.b.c", "1abc"} {
		if _, err := fencesql.New(fencesql.Postgres, fencesql.WithTable(name)); !errors.Is(err, fencesql.ErrBadTable) {
			t.Errorf("New(table %q) = %v, want ErrBadTable", name, err)
		}
	}
	if _, err := fencesql.New(fencesql.Dialect(9)); !errors.Is(err, fencesql.ErrUnknownDialect) {
		t.Errorf("unknown dialect: %v", err)
	}
	_, g, db := sqliteBackend().subject(t, fence.AtLeast)
	err := g.Update(context.Background(), db, nil, fence.Token{Scope: "s", Value: 1 << 63}, func(*sql.Tx) error { return nil })
	if !errors.Is(err, fencesql.ErrTokenRange) {
		t.Fatalf("token 2^63: %v, want ErrTokenRange", err)
	}
}

// A token the guard cannot store is malformed, so the wire answers it as
// one: 400 malformed_token, InvalidArgument/MALFORMED_FENCING_TOKEN.
func TestTokenOutOfRangeIsMalformedOnTheWire(t *testing.T) {
	_, g, db := sqliteBackend().subject(t, fence.AtLeast)
	err := g.Update(context.Background(), db, nil, fence.Token{Scope: "s", Value: 1 << 63}, func(*sql.Tx) error { return nil })
	if !errors.Is(err, fencesql.ErrTokenRange) || !errors.Is(err, fence.ErrMalformedToken) {
		t.Fatalf("token 2^63: %v, want ErrTokenRange and fence.ErrMalformedToken", err)
	}
	rec := httptest.NewRecorder()
	var body fencehttp.ErrorBody
	if !fencehttp.WriteError(rec, err) || rec.Code != http.StatusBadRequest ||
		json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error != fencehttp.CodeMalformedToken {
		t.Fatalf("HTTP: %d %s, want 400 %s", rec.Code, rec.Body, fencehttp.CodeMalformedToken)
	}
	if s := status.Convert(fencegrpc.ToStatus(err)); s.Code() != codes.InvalidArgument {
		t.Fatalf("gRPC: %v, want InvalidArgument", s.Err())
	}
}

func TestCheckStatementIsOneConditionalUpsert(t *testing.T) {
	for _, rule := range []fence.Rule{fence.AtLeast, fence.Strict} {
		g, err := fencesql.New(fencesql.Postgres, fencesql.WithRule(rule))
		if err != nil {
			t.Fatal(err)
		}
		want := "f.highest <= excluded.highest"
		if rule == fence.Strict {
			want = "f.highest < excluded.highest"
		}
		if s := g.CheckStatement(); !strings.Contains(s, want) || strings.Count(s, ";") != 0 {
			t.Fatalf("%v statement %q lacks %q", rule, s, want)
		}
	}
}
