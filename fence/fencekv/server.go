// Package fencekv is fencedkv: a small durable key-value store over HTTP
// that enforces fencing tokens with the bbolt guard, keeps an audit log of
// every write it accepted or refused, and serves as the protected resource
// of the demo and of the fault-injection harness. Client is its Go client.
//
// HTTP API (tokens in the header "Fencing-Token: <scope>=<token>"):
//
//	PUT  /kv/{key}        set the value to the body          200 AuditRecord
//	POST /append/{key}    append the body to the value        200 AuditRecord
//	GET  /kv/{key}        the value (404 if none); header Fencing-Highest
//	GET  /scopes/{scope}  {"scope": ..., "highest": ...}
//	GET  /audit?after=N&limit=M   {"records": [AuditRecord...], "next": N}
//	GET  /healthz         {"fenced": true|false}
//
// A write's scope is its key unless Config.Scope names one scope for all
// keys; a token for another scope is refused (400 wrong_scope). A stale
// token gets 409 (fencehttp's ErrorBody), a missing or malformed one 400.
//
// Every write, accepted or refused, is one bbolt transaction that commits
// (with fsync) before the answer is sent: the check, the value, the new
// highest and the audit record are durable together, so a kill -9 loses
// nothing that was acknowledged. With Config.Unfenced set, the store
// accepts every write whatever its token (the control run that shows what
// fencing prevents) and still audits each one.
package fencekv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
	"github.com/leasefence/leasefence/fence/fencehttp"
)

// Limits of the API.
const (
	// MaxValueSize is the largest body of a write, and the largest value an
	// append may produce (413 beyond).
	MaxValueSize = 1 << 20
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// MaxAuditPage is the most audit records one GET /audit returns.
	MaxAuditPage = 10000
)

var (
	bucketKV    = []byte("kv")
	bucketAudit = []byte("audit")
)

// Outcomes of an AuditRecord.
const (
	OutcomeAccepted = "accepted"
	OutcomeStale    = "stale"
	OutcomeInvalid  = "invalid"
)

// AuditRecord is one write as the store saw it.
type AuditRecord struct {
	// Seq numbers records from 1 in commit order, without gaps.
	Seq uint64 `json:"seq"`
	// Time is the store's wall clock at the write, for humans only.
	Time time.Time `json:"time"`
	// Op is "put" or "append".
	Op  string `json:"op"`
	Key string `json:"key"`
	// Scope and Token are what the request presented (empty and 0 if it
	// presented nothing usable).
	Scope string `json:"scope,omitempty"`
	Token uint64 `json:"token"`
	// Outcome is accepted, stale or invalid.
	Outcome string `json:"outcome"`
	// Highest is the scope's highest accepted token before this write.
	Highest uint64 `json:"highest"`
	// Digest is the SHA-256 (hex) of the body presented; Size its length.
	Digest string `json:"digest"`
	Size   int    `json:"size"`
	// Fenced is false when the store ran with enforcement off.
	Fenced bool `json:"fenced"`
	// Reason explains an invalid write.
	Reason string `json:"reason,omitempty"`
}

// Config configures a Server.
type Config struct {
	// Listen is the host:port to serve on (":0" style ports are fine).
	Listen string
	// DataFile is the bbolt database file (created if missing).
	DataFile string
	// Unfenced turns enforcement off: every write is accepted and audited.
	Unfenced bool
	// Rule is the acceptance rule (default fence.AtLeast).
	Rule fence.Rule
	// Scope, if set, is the one fencing scope of every key; by default
	// each key is its own scope.
	Scope string
	// Logger receives the server's logs; nil means hclog's default.
	Logger hclog.Logger
	// Clock stamps audit records; nil means time.Now.
	Clock func() time.Time
	// Testing holds the server's test switches (TestingKnobs): planted
	// defects in a build with the plantedbugs tag, nothing in a release
	// build, where the type is empty.
	Testing TestingKnobs
}

// DefaultConfig returns the defaults: listen on 127.0.0.1:7100, fenced,
// fence.AtLeast, a scope per key.
func DefaultConfig() Config { return Config{Listen: "127.0.0.1:7100"} }

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("fencekv: Listen is empty")
	case c.DataFile == "":
		return errors.New("fencekv: DataFile is empty")
	case c.Rule != fence.AtLeast && c.Rule != fence.Strict:
		return fmt.Errorf("fencekv: unknown rule %d", c.Rule)
	}
	if c.Scope != "" {
		if err := (fence.Token{Scope: c.Scope, Value: 1}).Validate(); err != nil {
			return fmt.Errorf("fencekv: Scope: %w", err)
		}
	}
	return c.Testing.validate()
}

// Server is a running fencedkv. Handler is safe for concurrent use.
type Server struct {
	cfg   Config
	log   hclog.Logger
	db    *bolt.DB
	guard *fencebolt.Guard
}

// Open opens (or creates) the database of cfg. Serve it with Handler or
// ListenAndServe; Close closes the database.
func Open(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	db, err := bolt.Open(cfg.DataFile, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("fencekv: open %s: %w", cfg.DataFile, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKV, bucketAudit} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("fencekv: %w", err)
	}
	g, err := fencebolt.New(db, fencebolt.WithRule(cfg.Rule))
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Server{cfg: cfg, log: cfg.Logger.Named("kv"), db: db, guard: g}, nil
}

// Close closes the database. Requests still running fail.
func (s *Server) Close() error { return s.db.Close() }

// Run serves cfg until ctx ends, then stops the HTTP server (in-flight
// requests get up to 5 s) and closes the database. ready, if not nil, is
// called with the bound address once the server listens.
func Run(ctx context.Context, cfg Config, ready func(addr net.Addr)) error {
	s, err := Open(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("fencekv: listen: %w", err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("serving", "addr", ln.Addr().String(), "fenced", !cfg.Unfenced, "rule", cfg.Rule.String(), "data-file", cfg.DataFile)
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("fencekv: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /kv/{key...}", func(w http.ResponseWriter, r *http.Request) { s.serveWrite(w, r, "put") })
	mux.HandleFunc("POST /append/{key...}", func(w http.ResponseWriter, r *http.Request) { s.serveWrite(w, r, "append") })
	mux.HandleFunc("GET /kv/{key...}", s.serveGet)
	mux.HandleFunc("GET /scopes/{scope...}", s.serveScope)
	mux.HandleFunc("GET /audit", s.serveAudit)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"fenced": !s.cfg.Unfenced})
	})
	return mux
}

func (s *Server) scopeOf(key string) string {
	if s.cfg.Scope != "" {
		return s.cfg.Scope
	}
	return key
}

// errWrongScope refuses a token drawn from another scope than the key's.
var errWrongScope = errors.New("fencekv: token scope does not cover the key")

func (s *Server) serveWrite(w http.ResponseWriter, r *http.Request, op string) {
	key := r.PathValue("key")
	if key == "" || len(key) > MaxKeyLen {
		writeJSON(w, http.StatusBadRequest, fencehttp.ErrorBody{Error: "bad_key", Message: fmt.Sprintf("key must be 1..%d bytes", MaxKeyLen)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, fencehttp.ErrorBody{Error: "too_large", Message: err.Error()})
		return
	}
	tok, tokErr := fencehttp.TokenFromRequest(r)
	if tokErr == nil && tok.Scope != s.scopeOf(key) {
		tokErr = fmt.Errorf("%w: token of scope %q, key %q is in scope %q", errWrongScope, tok.Scope, key, s.scopeOf(key))
	}
	rec, err := s.write(op, key, tok, tokErr, body)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, rec)
	case errors.Is(err, errWrongScope):
		writeJSON(w, http.StatusBadRequest, fencehttp.ErrorBody{Error: "wrong_scope", Message: err.Error()})
	case errors.Is(err, errTooLarge):
		writeJSON(w, http.StatusRequestEntityTooLarge, fencehttp.ErrorBody{Error: "too_large", Message: err.Error()})
	case fencehttp.WriteError(w, err):
	default:
		s.log.Error("write failed", "key", key, "error", err)
		writeJSON(w, http.StatusInternalServerError, fencehttp.ErrorBody{Error: "internal", Message: err.Error()})
	}
}

var errTooLarge = fmt.Errorf("fencekv: value would exceed %d bytes", MaxValueSize)

// write is the whole write path, one bbolt transaction: check the token,
// apply the effect, record the new highest and the audit record. A refused
// write commits its audit record alone. tokErr is the reason the request's
// token is unusable, if it is.
func (s *Server) write(op, key string, tok fence.Token, tokErr error, body []byte) (AuditRecord, error) {
	sum := sha256.Sum256(body)
	rec := AuditRecord{
		Op: op, Key: key, Scope: tok.Scope, Token: tok.Value,
		Digest: hex.EncodeToString(sum[:]), Size: len(body), Fenced: !s.cfg.Unfenced,
	}
	var refusal error
	err := s.db.Update(func(tx *bolt.Tx) error {
		refusal = nil
		rec.Time = s.cfg.Clock().UTC()
		highest, err := s.guard.HighestTx(tx, s.scopeOf(key))
		if err != nil {
			return err
		}
		rec.Highest = highest
		switch {
		case s.cfg.Unfenced:
			// Control run: accept whatever the token; keep the highest
			// current so the audit shows what fencing would have refused.
			if tokErr == nil && tok.Value > highest {
				if err := s.guard.Check(tx, tok); err != nil {
					return err
				}
			}
		case tokErr != nil:
			refusal = tokErr
		default:
			refusal = s.guard.Check(tx, tok)
			if refusal != nil && !errors.Is(refusal, fence.ErrStaleToken) {
				return refusal
			}
			if errors.Is(refusal, fence.ErrStaleToken) && s.cfg.Testing.planted(BugAcceptLowerToken) {
				refusal = nil
			}
		}
		switch {
		case refusal == nil:
			if err := applyEffect(tx, op, key, body); err != nil {
				return err
			}
			rec.Outcome = OutcomeAccepted
		case errors.Is(refusal, fence.ErrStaleToken):
			rec.Outcome = OutcomeStale
		default:
			rec.Outcome, rec.Reason = OutcomeInvalid, refusal.Error()
		}
		return appendAudit(tx, &rec)
	})
	if err != nil {
		// A rolled-back effect (too large) still deserves its audit record.
		if errors.Is(err, errTooLarge) {
			rec.Outcome, rec.Reason = OutcomeInvalid, err.Error()
			if aerr := s.db.Update(func(tx *bolt.Tx) error { return appendAudit(tx, &rec) }); aerr != nil {
				s.log.Error("audit record of a refused write lost", "key", key, "token", tok.Value, "error", aerr)
				return rec, errors.Join(err, aerr)
			}
		}
		return rec, err
	}
	if refusal != nil {
		s.log.Debug("write refused", "key", key, "token", tok.Value, "highest", rec.Highest, "reason", refusal)
		return rec, refusal
	}
	return rec, nil
}

func applyEffect(tx *bolt.Tx, op, key string, body []byte) error {
	b := tx.Bucket(bucketKV)
	value := body
	if op == "append" {
		old := b.Get([]byte(key))
		if len(old)+len(body) > MaxValueSize {
			return errTooLarge
		}
		value = append(append(make([]byte, 0, len(old)+len(body)), old...), body...)
	}
	return b.Put([]byte(key), value)
}

func appendAudit(tx *bolt.Tx, rec *AuditRecord) error {
	b := tx.Bucket(bucketAudit)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	rec.Seq = seq
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Put(seqKey(seq), v)
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// HighestHeader is the response header of GET /kv/{key} with the highest
// token accepted in the key's scope.
const HighestHeader = "Fencing-Highest"

func (s *Server) serveGet(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	var value []byte
	var found bool
	var highest uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKV).Get([]byte(key))
		found = v != nil
		value = append([]byte(nil), v...)
		var err error
		highest, err = s.guard.HighestTx(tx, s.scopeOf(key))
		return err
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, fencehttp.ErrorBody{Error: "internal", Message: err.Error()})
		return
	}
	w.Header().Set(HighestHeader, strconv.FormatUint(highest, 10))
	if !found {
		writeJSON(w, http.StatusNotFound, fencehttp.ErrorBody{Error: "not_found", Message: "no value for " + strconv.Quote(key)})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(value)
}

// ScopeInfo is the body of GET /scopes/{scope}.
type ScopeInfo struct {
	Scope   string `json:"scope"`
	Highest uint64 `json:"highest"`
}

func (s *Server) serveScope(w http.ResponseWriter, r *http.Request) {
	scope := r.PathValue("scope")
	h, err := s.guard.Highest(scope)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, fencehttp.ErrorBody{Error: "internal", Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ScopeInfo{Scope: scope, Highest: h})
}

// AuditPage is the body of GET /audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// Next is the seq to pass as after for the following page.
	Next uint64 `json:"next"`
}

func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, err1 := parseUintDefault(q.Get("after"), 0)
	limit, err2 := parseUintDefault(q.Get("limit"), 1000)
	if err1 != nil || err2 != nil || limit == 0 || limit > MaxAuditPage {
		writeJSON(w, http.StatusBadRequest, fencehttp.ErrorBody{Error: "bad_query", Message: fmt.Sprintf("after and limit (1..%d) are decimal integers", MaxAuditPage)})
		return
	}
	page := AuditPage{Records: []AuditRecord{}, Next: after}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && uint64(len(page.Records)) < limit; k, v = c.Next() {
			var rec AuditRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("audit record %x: %w", k, err)
			}
			page.Records = append(page.Records, rec)
			page.Next = rec.Seq
		}
		return nil
	})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, fencehttp.ErrorBody{Error: "internal", Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func parseUintDefault(s string, def uint64) (uint64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
