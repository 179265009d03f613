// Package fencebolt fences a bbolt database: the token check, the effect and
// the new highest token are one bbolt transaction, so they commit (durably,
// with bbolt's fsync on commit) or vanish together.
package fencebolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fence"
)

// DefaultBucket is the bucket that holds the highest token per scope unless
// WithBucket names another: key = scope, value = 8-byte big-endian token.
const DefaultBucket = "fence-highest"

// Guard keeps the highest accepted token per scope in a bucket of a bbolt
// database. It is safe for concurrent use (bbolt serializes writers).
type Guard struct {
	db     *bolt.DB
	bucket []byte
	rule   fence.Rule
}

// Option configures a Guard.
type Option func(*Guard)

// WithRule sets the acceptance rule (default fence.AtLeast).
func WithRule(r fence.Rule) Option { return func(g *Guard) { g.rule = r } }

// WithBucket names the bucket of highest tokens (default DefaultBucket).
func WithBucket(name string) Option { return func(g *Guard) { g.bucket = []byte(name) } }

// New returns a guard over db, creating its bucket if needed. The guard
// does not own db: closing db is the caller's business.
func New(db *bolt.DB, opts ...Option) (*Guard, error) {
	g := &Guard{db: db, bucket: []byte(DefaultBucket)}
	for _, o := range opts {
		o(g)
	}
	if len(g.bucket) == 0 {
		return nil, errors.New("fencebolt: empty bucket name")
	}
	if db.IsReadOnly() {
		return nil, errors.New("fencebolt: database is read-only")
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(g.bucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("fencebolt: create bucket: %w", err)
	}
	return g, nil
}

// Rule returns the guard's acceptance rule.
func (g *Guard) Rule() fence.Rule { return g.rule }

var _ fence.Guard = (*Guard)(nil)

// Check compares tok with the highest token of its scope inside tx (a
// writable transaction) and, if the rule admits it, records it as the new
// highest in the same transaction. On refusal it returns a
// *fence.StaleTokenError and writes nothing, so the caller may still commit
// other writes (an audit record, say) in tx. The record becomes durable only
// if tx commits: write the effect in the same tx, and roll back on any error.
func (g *Guard) Check(tx *bolt.Tx, tok fence.Token) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	if !tx.Writable() {
		return errors.New("fencebolt: Check needs a writable transaction")
	}
	b := tx.Bucket(g.bucket)
	if b == nil {
		return fmt.Errorf("fencebolt: bucket %q missing", g.bucket)
	}
	key := []byte(tok.Scope)
	highest, err := decode(b.Get(key))
	if err != nil {
		return err
	}
	if !g.rule.Admits(tok.Value, highest) {
		return &fence.StaleTokenError{Scope: tok.Scope, Presented: tok.Value, Highest: highest}
	}
	if tok.Value > highest {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], tok.Value)
		if err := b.Put(key, v[:]); err != nil {
			return fmt.Errorf("fencebolt: record token: %w", err)
		}
	}
	return nil
}

// Update runs one read-write transaction: Check, then effect(tx); it commits
// only if both succeed, so the effect and its token record are durable
// together or not at all (a panic in effect rolls back too). A refused token
// returns a *fence.StaleTokenError without calling effect.
func (g *Guard) Update(tok fence.Token, effect func(tx *bolt.Tx) error) error {
	return g.db.Update(func(tx *bolt.Tx) error {
		if err := g.Check(tx, tok); err != nil {
			return err
		}
		return effect(tx)
	})
}

// Do implements fence.Guard: effect runs inside the guard's transaction
// (so no two effects of any scope overlap) and the token is committed only
// if it returns nil. Effects written elsewhere than this database are not
// covered by the transaction; prefer Update for those that are.
func (g *Guard) Do(ctx context.Context, tok fence.Token, effect func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.Update(tok, func(*bolt.Tx) error { return effect(ctx) })
}

// Highest returns the highest token accepted in scope, 0 if none.
func (g *Guard) Highest(scope string) (uint64, error) {
	var h uint64
	err := g.db.View(func(tx *bolt.Tx) error {
		var err error
		h, err = g.HighestTx(tx, scope)
		return err
	})
	return h, err
}

// HighestTx returns the highest token accepted in scope as seen by tx.
func (g *Guard) HighestTx(tx *bolt.Tx, scope string) (uint64, error) {
	b := tx.Bucket(g.bucket)
	if b == nil {
		return 0, fmt.Errorf("fencebolt: bucket %q missing", g.bucket)
	}
	return decode(b.Get([]byte(scope)))
}

// decode reads a stored token. A record of any other length than 8 is
// corruption and stops the caller rather than reading as 0, which would
// let every stale token in.
func decode(v []byte) (uint64, error) {
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, fmt.Errorf("fencebolt: corrupt token record of %d bytes", len(v))
}
