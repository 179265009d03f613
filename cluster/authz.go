package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/transport"
)

// Metadata keys of authorization.
const (
	// authorizationKey carries "Bearer <token>".
	authorizationKey = "authorization"
	// identityKey carries, on a forwarded call, the identity the follower
	// resolved from a client certificate. The leader believes it only when
	// the forwarding connection presents a certificate named in the
	// policy's peers.
	identityKey = "leasefence-identity"
	// holderSep joins the caller's identity and its own label into the
	// lease holder when a policy is on: "<identity>|<label>".
	holderSep = fsm.OwnerSep
	// minTokenLen is the shortest bearer token a policy accepts.
	minTokenLen = 16
)

// Policy says who may do what. It is read once at start (Config.Policy or
// Config.PolicyFile) and never changes while the node runs.
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
// cluster's own nodes (with TLS on, a certificate carrying the peer
// identity URI SAN, Config.PeerIdentity, is a peer too): they may do
// everything, and a call they forward carries its caller's identity. Identity names are at most 256 bytes, no
// control characters and no '|'.
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

// LoadPolicy reads and checks a policy file (see Policy for the format).
//
// A file that group or others may write is refused: whoever can write it
// can grant themselves every lease at the next start.
func LoadPolicy(path string) (*Policy, error) {
	p, _, err := loadPolicyFile(path)
	return p, err
}

// loadPolicyFile is LoadPolicy that also tells whether every user may read
// the file (it holds bearer tokens).
func loadPolicyFile(path string) (p *Policy, worldReadable bool, err error) {
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
	p, err = ParsePolicy(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w (in %s)", err, path)
	}
	return p, fi.Mode().Perm()&0o004 != 0, nil
}

// names returns the identities and peers of p, sorted.
func (p *Policy) names() (identities, peers []string) {
	for name := range p.Identities {
		identities = append(identities, name)
	}
	sort.Strings(identities)
	peers = append(peers, p.Peers...)
	sort.Strings(peers)
	return identities, peers
}

// ParsePolicy decodes and checks a JSON policy. Unknown fields, duplicate
// tokens, short tokens and bad identity names are errors.
func ParsePolicy(b []byte) (*Policy, error) {
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

func (p *Policy) compile() error {
	p.tokens = map[[sha256.Size]byte]string{}
	p.peers = map[string]bool{}
	check := func(name string) error {
		if name == "" || strings.Contains(name, holderSep) {
			return fmt.Errorf("cluster: policy: identity %q must be non-empty and contain no %q", name, holderSep)
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
			if len(tok) < minTokenLen {
				return fmt.Errorf("cluster: policy: a token of %q is shorter than %d bytes", name, minTokenLen)
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

// caller is who makes a call, as the policy sees it.
type caller struct {
	name  string // identity; "" for an in-process call
	grant *Grant // nil for a peer or an in-process call: everything allowed
}

func (c *caller) all() bool { return c.grant == nil }

type callerKey struct{}

// perm names what a call needs.
type perm int

const (
	permAny      perm = iota // any known identity (status)
	permResource             // acquire, renew, release, get on a resource
	permWatch                // watch a key or prefix
	permAdmin                // join, remove, transfer leadership, snapshot
)

func (p perm) String() string {
	return [...]string{"status", "resource", "watch", "admin"}[p]
}

// identify resolves the caller of ctx under the node's policy. Without a
// policy, and for in-process calls (no gRPC peer: LeaseServer embedding),
// the caller may do everything.
func (n *Node) identify(ctx context.Context) (*caller, error) {
	if c, ok := ctx.Value(callerKey{}).(*caller); ok {
		return c, nil
	}
	p := n.policy
	if p == nil {
		return &caller{}, nil
	}
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return &caller{}, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(authorizationKey); len(v) > 0 {
		name := ""
		if scheme, tok, ok := strings.Cut(v[0], " "); ok && strings.EqualFold(scheme, "Bearer") {
			name = p.tokens[sha256.Sum256([]byte(tok))]
		}
		if name == "" {
			return nil, fmt.Errorf("%w: unknown bearer token", ErrPermissionDenied)
		}
		return &caller{name: name, grant: p.Identities[name]}, nil
	}
	leaf := verifiedLeaf(pr)
	if leaf == nil {
		return nil, fmt.Errorf("%w: no credentials (a bearer token or a verified client certificate)", ErrPermissionDenied)
	}
	name := certIdentity(leaf)
	peerID := n.cfg.PeerIdentity
	if peerID == "" {
		peerID = transport.DefaultPeerIdentity
	}
	if p.peers[name] || (n.cfg.TLS.Enabled() && transport.HasPeerIdentity(leaf, peerID)) {
		if fwd := md.Get(identityKey); len(fwd) > 0 && isForwarded(ctx) {
			if g := p.Identities[fwd[0]]; g != nil {
				return &caller{name: fwd[0], grant: g}, nil
			}
			return nil, fmt.Errorf("%w: unknown identity %q forwarded by %q", ErrPermissionDenied, fwd[0], name)
		}
		return &caller{name: name}, nil
	}
	if g := p.Identities[name]; g != nil {
		return &caller{name: name, grant: g}, nil
	}
	return nil, fmt.Errorf("%w: unknown identity %q", ErrPermissionDenied, name)
}

// verifiedLeaf returns the verified client certificate of a TLS
// connection, or nil.
func verifiedLeaf(pr *peer.Peer) *x509.Certificate {
	ti, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	return ti.State.PeerCertificates[0]
}

// certIdentity names a client certificate: its first URI SAN, else its
// subject CN.
func certIdentity(leaf *x509.Certificate) string {
	if len(leaf.URIs) > 0 {
		return leaf.URIs[0].String()
	}
	return leaf.Subject.CommonName
}

func within(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// authorize checks that the caller of ctx may do what p needs on resource
// (a watch key for permWatch; a prefix watch passes the key, which must lie
// within a watch prefix). It returns ctx carrying the caller, so that a
// forwarded call keeps the caller's identity. A refusal wraps
// ErrPermissionDenied and is logged with the identity.
func (n *Node) authorize(ctx context.Context, p perm, resource string) (context.Context, *caller, error) {
	if n.policy == nil {
		return ctx, &caller{}, nil
	}
	c, err := n.identify(ctx)
	if err != nil {
		n.log.Warn("permission denied", "op", p.String(), "resource", resource, "reason", err.Error())
		return ctx, nil, err
	}
	if !c.all() {
		ok := true
		switch p {
		case permResource:
			ok = within(resource, c.grant.Resources)
		case permWatch:
			ok = within(resource, c.grant.Watch)
		case permAdmin:
			ok = c.grant.Admin
		}
		if !ok {
			n.log.Warn("permission denied", "identity", c.name, "op", p.String(), "resource", resource)
			if p == permAdmin {
				return ctx, nil, fmt.Errorf("%w: %q is not an administrator", ErrPermissionDenied, c.name)
			}
			return ctx, nil, fmt.Errorf("%w: %q may not %s %q (outside its prefixes)", ErrPermissionDenied, c.name, p, resource)
		}
	}
	return context.WithValue(ctx, callerKey{}, c), c, nil
}

// authorizeLease checks a renew or release: the lease id is the
// capability, but its resource must lie within the caller's prefixes. A
// lease this node does not know (a follower that has not applied the grant
// yet, or a gone lease) passes: the leader checks again, and an unknown id
// changes nothing.
func (n *Node) authorizeLease(ctx context.Context, id []byte) (context.Context, error) {
	if n.policy == nil {
		return ctx, nil
	}
	c, err := n.identify(ctx)
	if err != nil {
		n.log.Warn("permission denied", "op", "lease", "lease-id", api.FormatLeaseID(id), "reason", err.Error())
		return ctx, err
	}
	if c.all() || len(id) != fsm.LeaseIDLen {
		return context.WithValue(ctx, callerKey{}, c), nil
	}
	var (
		l     fsm.Lease
		found bool
	)
	n.sm.read(func(st *fsm.State) { l, found = st.LeaseByID([fsm.LeaseIDLen]byte(id)) })
	if !found {
		return context.WithValue(ctx, callerKey{}, c), nil
	}
	ctx, _, err = n.authorize(ctx, permResource, l.Resource)
	return ctx, err
}

// forwardCredentials copies the caller's credentials onto a call forwarded
// to the leader: the bearer token (the leader checks it itself) and the
// identity resolved here (believed only from a peer's certificate).
func forwardCredentials(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(authorizationKey); len(v) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, authorizationKey, v[0])
		}
	}
	if c, ok := ctx.Value(callerKey{}).(*caller); ok && c.name != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, identityKey, c.name)
	}
	return ctx
}

// holderFor is the holder label a lease gets: with a policy, the caller's
// identity joined with its own label, so that leases can be counted per
// identity (Config.MaxLeasesPerIdentity).
func holderFor(c *caller, label string) string {
	if c == nil || c.all() {
		return label
	}
	if label == "" || label == c.name {
		return c.name
	}
	return c.name + holderSep + label
}

// holdsFor reports whether holder was labelled by holderFor for identity.
func holdsFor(holder, identity string) bool {
	return holder == identity || strings.HasPrefix(holder, identity+holderSep)
}

// loadPolicy returns the policy c turns on, checked, or nil.
func (c Config) loadPolicy() (*Policy, error) {
	var p *Policy
	source := "Config.Policy"
	switch {
	case c.Policy != nil:
		cp := *c.Policy // compile a copy: the caller's may be shared
		if err := cp.compile(); err != nil {
			return nil, err
		}
		p = &cp
	case c.PolicyFile != "":
		var worldReadable bool
		var err error
		if p, worldReadable, err = loadPolicyFile(c.PolicyFile); err != nil {
			return nil, err
		}
		source = c.PolicyFile
		if worldReadable {
			c.Logger.Warn("the policy file is readable by every user on this host, and it holds bearer tokens: chmod o-r it", "file", c.PolicyFile)
		}
	default:
		return nil, nil
	}
	ids, peers := p.names()
	c.Logger.Info("authorization policy in force", "source", source, "identities", strings.Join(ids, ","), "peers", strings.Join(peers, ","))
	return p, nil
}

// clientWatchers counts the open Watch streams per client key (the
// identity with a policy, the connection's remote address without).
type clientWatchers struct {
	mu sync.Mutex
	n  map[string]int
}

func newClientWatchers() *clientWatchers { return &clientWatchers{n: map[string]int{}} }

// add counts one more watcher of key unless it already has max.
func (w *clientWatchers) add(key string, max int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[key] >= max {
		return false
	}
	w.n[key]++
	return true
}

func (w *clientWatchers) done(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[key]--; w.n[key] <= 0 {
		delete(w.n, key)
	}
}

// watcherKey is what Config.MaxWatchersPerClient counts against.
func watcherKey(ctx context.Context, c *caller) string {
	if c != nil && c.name != "" {
		return "identity:" + c.name
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		return "conn:" + pr.Addr.String()
	}
	return "local"
}

// checkLeaseLimit refuses, at the leader, an Acquire of resource by an
// identity that already holds Config.MaxLeasesPerIdentity live leases
// (counted in the applied state by holder label, see holderFor, with
// fsm.State.HeldBy: O(1), and a lease counts until a Tick removes it, up
// to skew_margin past its expiry). When the identity already holds
// resource the Acquire passes: it can only replay (a retry whose first
// answer was lost) or be refused as held, never add a lease. Acquires of
// one identity racing each other may overshoot by the number in flight.
func (n *Node) checkLeaseLimit(c *caller, resource string) error {
	if n.policy == nil || c == nil || c.all() {
		return nil
	}
	held := 0
	n.sm.read(func(st *fsm.State) {
		if l, ok := st.Lease(resource); ok && holdsFor(l.Holder, c.name) {
			held = -1
			return
		}
		held = st.HeldBy(c.name)
	})
	if max := n.cfg.MaxLeasesPerIdentity; held >= max {
		n.log.Warn("lease limit reached", "identity", c.name, "leases", held, "max", max)
		return fmt.Errorf("%w: %q holds %d leases (max %d per identity)", ErrLimit, c.name, held, max)
	}
	return nil
}

// count returns the open watchers of key.
func (w *clientWatchers) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[key]
}

// total returns the open watchers counted over all clients.
func (w *clientWatchers) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := 0
	for _, c := range w.n {
		t += c
	}
	return t
}
