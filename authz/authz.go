// Package authz is the authorization policy of a leasefence node: who may
// do what. It parses and checks the policy, names a caller from the
// credentials it presented and decides whether the caller may do an
// operation. It is pure: no gRPC, no node, no logging; package cluster
// takes the credentials off the connection, calls it, and logs refusals.
package authz

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/leasefence/leasefence/fsm"
)

// ErrPermissionDenied is returned when the caller is unknown or may not do
// what it asked. Its text is what clients have always been answered (the
// node maps it to codes.PermissionDenied), so it keeps the node's prefix.
var ErrPermissionDenied = errors.New("cluster: permission denied")

const (
	// HolderSep joins the caller's identity and its own label into the
	// lease holder when a policy is on: "<identity>|<label>".
	HolderSep = fsm.OwnerSep
	// MinTokenLen is the shortest bearer token a policy accepts.
	MinTokenLen = 16
)

// Policy says who may do what. It is read once at start and never changes
// while the node runs; a checked Policy (from Parse, Load or Compile) is
// safe for concurrent use.
//
// The file is JSON:
//
//	{
//	  "identities": {
//	    "billing": {
//	      "tokens":    ["<at least 16 bytes of secret>"],
//	      "resources": ["billing/"],
//	      "watch":     ["billing/"]
//	    },
//	    "spiffe://example.org/ops": {"resources": [""], "watch": [""], "admin": true}
//	  },
//	  "peers": ["node-1", "node-2", "node-3"]
//	}
//
// An identity is either the name a bearer token maps to or the name of a
// verified client certificate (its first URI SAN, else its subject CN).
// "resources" are the resource prefixes the identity may acquire, renew,
// release and get; "watch" the prefixes it may watch (a prefix watch needs
// its key within one); "" is every resource. "admin" allows join, remove,
// transfer leadership and snapshot. "peers" names the certificates of the
// cluster's own nodes (with TLS on, a certificate carrying the node's peer
// identity URI SAN is a peer too): they may do everything, and a call they
// forward carries its caller's identity. Identity names are at most 256
// bytes, no control characters and no '|'.
type Policy struct {
	Identities map[string]*Grant `json:"identities"`
	Peers      []string          `json:"peers,omitempty"`

	tokens map[[sha256.Size]byte]string // sha256(token) -> identity
	peers  map[string]bool
}

// Grant is what one identity may do.
type Grant struct {
	Tokens    []string `json:"tokens,omitempty"`
	Resources []string `json:"resources,omitempty"`
	Watch     []string `json:"watch,omitempty"`
	Admin     bool     `json:"admin,omitempty"`
}

// Load reads and checks a policy file (see Policy for the format).
//
// A file that group or others may write is refused: whoever can write it
// can grant themselves every lease at the next start.
func Load(path string) (*Policy, error) {
	p, _, err := LoadFile(path)
	return p, err
}

// LoadFile is Load that also tells whether every user may read the file
// (it holds bearer tokens; the caller should warn).
func LoadFile(path string) (p *Policy, worldReadable bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: policy: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o022 != 0 {
		return nil, false, fmt.Errorf("cluster: policy file %s is writable by group or others (mode %v): whoever can write it can grant themselves every lease; chmod go-w it (0600 or 0640)", path, mode)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: policy: %w", err)
	}
	p, err = Parse(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w (in %s)", err, path)
	}
	return p, fi.Mode().Perm()&0o004 != 0, nil
}

// Parse decodes and checks a JSON policy. Unknown fields, duplicate
// tokens, short tokens and bad identity names are errors.
func Parse(b []byte) (*Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("cluster: policy: %w", err)
	}
	if err := p.compile(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Compile checks a policy built in Go (as Parse checks a file) and returns
// a checked copy; p itself is not changed (the caller's may be shared).
func Compile(p *Policy) (*Policy, error) {
	cp := *p
	if err := cp.compile(); err != nil {
		return nil, err
	}
	return &cp, nil
}

func (p *Policy) compile() error {
	p.tokens = map[[sha256.Size]byte]string{}
	p.peers = map[string]bool{}
	check := func(name string) error {
		if name == "" || strings.Contains(name, HolderSep) {
			return fmt.Errorf("cluster: policy: identity %q must be non-empty and contain no %q", name, HolderSep)
		}
		if err := fsm.ValidateHolder(name); err != nil {
			return fmt.Errorf("cluster: policy: identity %q: %w", name, err)
		}
		return nil
	}
	names := make([]string, 0, len(p.Identities))
	for name := range p.Identities {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := check(name); err != nil {
			return err
		}
		g := p.Identities[name]
		if g == nil {
			return fmt.Errorf("cluster: policy: identity %q has no grant", name)
		}
		for _, tok := range g.Tokens {
			if len(tok) < MinTokenLen {
				return fmt.Errorf("cluster: policy: a token of %q is shorter than %d bytes", name, MinTokenLen)
			}
			h := sha256.Sum256([]byte(tok))
			if other, dup := p.tokens[h]; dup {
				return fmt.Errorf("cluster: policy: a token is given to both %q and %q", other, name)
			}
			p.tokens[h] = name
		}
	}
	for _, name := range p.Peers {
		if err := check(name); err != nil {
			return err
		}
		p.peers[name] = true
	}
	return nil
}

// Names returns the identities and peers of p, sorted (for a log line;
// never the tokens).
func (p *Policy) Names() (identities, peers []string) {
	for name := range p.Identities {
		identities = append(identities, name)
	}
	sort.Strings(identities)
	peers = append(peers, p.Peers...)
	sort.Strings(peers)
	return identities, peers
}

// Caller is who makes a call, as the policy sees it.
type Caller struct {
	Name  string // identity; "" for an in-process call
	Grant *Grant // nil for a peer or an in-process call: everything allowed
}

// All reports whether the caller may do everything (a peer, an in-process
// call, or any caller when no policy is on).
func (c *Caller) All() bool { return c.Grant == nil }

// Perm names what a call needs.
type Perm int

const (
	Any      Perm = iota // any known identity (status)
	Resource             // acquire, renew, release, get on a resource
	Watch                // watch a key or prefix
	Admin                // join, remove, transfer leadership, snapshot
)

func (p Perm) String() string {
	return [...]string{"status", "resource", "watch", "admin"}[p]
}

// Credentials are what a remote caller presented, taken off its
// connection by the node.
type Credentials struct {
	// Authorization is the "authorization" metadata value ("Bearer
	// <token>"); HasAuthorization says the key was present at all (an
	// empty or malformed value is then refused, not ignored).
	Authorization    string
	HasAuthorization bool
	// Cert is the verified client certificate, nil without one.
	Cert *x509.Certificate
	// CertIsPeer: Cert carries the cluster's peer identity (TLS on).
	CertIsPeer bool
	// Forwarded: the call was forwarded by a node. ForwardedIdentity is
	// the identity that node resolved for its caller (HasForwardedIdentity:
	// the key was present). It is believed only from a peer's certificate.
	Forwarded            bool
	ForwardedIdentity    string
	HasForwardedIdentity bool
}

// Identify names the caller who presented cr. A bearer token wins over a
// certificate; a peer's certificate may vouch for a forwarded caller. An
// unknown caller is refused with an error wrapping ErrPermissionDenied.
func (p *Policy) Identify(cr Credentials) (*Caller, error) {
	if cr.HasAuthorization {
		name := ""
		if scheme, tok, ok := strings.Cut(cr.Authorization, " "); ok && strings.EqualFold(scheme, "Bearer") {
			name = p.tokens[sha256.Sum256([]byte(tok))]
		}
		if name == "" {
			return nil, fmt.Errorf("%w: unknown bearer token", ErrPermissionDenied)
		}
		return &Caller{Name: name, Grant: p.Identities[name]}, nil
	}
	if cr.Cert == nil {
		return nil, fmt.Errorf("%w: no credentials (a bearer token or a verified client certificate)", ErrPermissionDenied)
	}
	name := CertIdentity(cr.Cert)
	if p.peers[name] || cr.CertIsPeer {
		if cr.HasForwardedIdentity && cr.Forwarded {
			if g := p.Identities[cr.ForwardedIdentity]; g != nil {
				return &Caller{Name: cr.ForwardedIdentity, Grant: g}, nil
			}
			return nil, fmt.Errorf("%w: unknown identity %q forwarded by %q", ErrPermissionDenied, cr.ForwardedIdentity, name)
		}
		return &Caller{Name: name}, nil
	}
	if g := p.Identities[name]; g != nil {
		return &Caller{Name: name, Grant: g}, nil
	}
	return nil, fmt.Errorf("%w: unknown identity %q", ErrPermissionDenied, name)
}

// CertIdentity names a client certificate: its first URI SAN, else its
// subject CN.
func CertIdentity(leaf *x509.Certificate) string {
	if len(leaf.URIs) > 0 {
		return leaf.URIs[0].String()
	}
	return leaf.Subject.CommonName
}

// Allow checks that c may do what p needs on resource (a watch key for
// Watch; a prefix watch passes its key, which must lie within a watch
// prefix). A refusal wraps ErrPermissionDenied.
func Allow(c *Caller, p Perm, resource string) error {
	if c.All() {
		return nil
	}
	ok := true
	switch p {
	case Resource:
		ok = within(resource, c.Grant.Resources)
	case Watch:
		ok = within(resource, c.Grant.Watch)
	case Admin:
		ok = c.Grant.Admin
	}
	if ok {
		return nil
	}
	if p == Admin {
		return fmt.Errorf("%w: %q is not an administrator", ErrPermissionDenied, c.Name)
	}
	return fmt.Errorf("%w: %q may not %s %q (outside its prefixes)", ErrPermissionDenied, c.Name, p, resource)
}

func within(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// HolderFor is the holder label a lease gets: with a policy, the caller's
// identity joined with its own label, so that leases can be counted per
// identity.
func HolderFor(c *Caller, label string) string {
	if c == nil || c.All() {
		return label
	}
	if label == "" || label == c.Name {
		return c.Name
	}
	return c.Name + HolderSep + label
}

// HoldsFor reports whether holder was labelled by HolderFor for identity.
func HoldsFor(holder, identity string) bool {
	return holder == identity || strings.HasPrefix(holder, identity+HolderSep)
}
