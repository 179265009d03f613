package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/authz"
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
)

// Policy says who may do what: the policy language lives in
// package authz (see authz.Policy for the file format). Config.Policy or
// Config.PolicyFile turns it on; it never changes while the node runs.
type Policy = authz.Policy

// Grant is what one identity may do (authz.Grant).
type Grant = authz.Grant

// LoadPolicy reads and checks a policy file (authz.Load). A file that
// group or others may write is refused.
func LoadPolicy(path string) (*Policy, error) { return authz.Load(path) }

// ParsePolicy decodes and checks a JSON policy (authz.Parse).
func ParsePolicy(b []byte) (*Policy, error) { return authz.Parse(b) }

// caller is who makes a call, as the policy sees it.
type caller = authz.Caller

type callerKey struct{}

// perm names what a call needs.
type perm = authz.Perm

const (
	permAny      = authz.Any      // any known identity (status)
	permResource = authz.Resource // acquire, renew, release, get on a resource
	permWatch    = authz.Watch    // watch a key or prefix
	permAdmin    = authz.Admin    // join, remove, transfer leadership, snapshot
)

// identify resolves the caller of ctx under the node's policy. Without a
// policy, and for in-process calls (no gRPC peer: LeaseServer embedding),
// the caller may do everything. It takes the credentials off the
// connection; authz.Policy.Identify decides.
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
	var cr authz.Credentials
	if v := md.Get(authorizationKey); len(v) > 0 {
		cr.Authorization, cr.HasAuthorization = v[0], true
	} else if cr.Cert = verifiedLeaf(pr); cr.Cert != nil {
		peerID := n.cfg.PeerIdentity
		if peerID == "" {
			peerID = transport.DefaultPeerIdentity
		}
		cr.CertIsPeer = n.cfg.TLS.Enabled() && transport.HasPeerIdentity(cr.Cert, peerID)
		if fwd := md.Get(identityKey); len(fwd) > 0 {
			cr.ForwardedIdentity, cr.HasForwardedIdentity = fwd[0], true
			cr.Forwarded = isForwarded(ctx)
		}
	}
	return p.Identify(cr)
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

// authorize checks that the caller of ctx may do what p needs on resource
// (authz.Allow). It returns ctx carrying the caller, so that a forwarded
// call keeps the caller's identity. A refusal wraps ErrPermissionDenied
// and is logged with the identity.
func (n *Node) authorize(ctx context.Context, p perm, resource string) (context.Context, *caller, error) {
	if n.policy == nil {
		return ctx, &caller{}, nil
	}
	c, err := n.identify(ctx)
	if err != nil {
		n.log.Warn("permission denied", "op", p.String(), "resource", resource, "reason", err.Error())
		return ctx, nil, err
	}
	if err := authz.Allow(c, p, resource); err != nil {
		n.log.Warn("permission denied", "identity", c.Name, "op", p.String(), "resource", resource)
		return ctx, nil, err
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
	if c.All() || len(id) != fsm.LeaseIDLen {
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
	if c, ok := ctx.Value(callerKey{}).(*caller); ok && c.Name != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, identityKey, c.Name)
	}
	if wantsHeartbeats(ctx) { // a relayed keep-alive stream: the leader sends them
		ctx = metadata.AppendToOutgoingContext(ctx, api.HeaderKeepAliveHeartbeats, "1")
	}
	return ctx
}

// wantsHeartbeats reports whether the caller of a KeepAlive stream asked
// for heartbeats (api.HeaderKeepAliveHeartbeats).
func wantsHeartbeats(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && slices.Contains(md.Get(api.HeaderKeepAliveHeartbeats), "1")
}

// holderFor is the holder label a lease gets (authz.HolderFor): with a
// policy, "<identity>|<label>", so that leases can be counted per identity
// (Config.MaxLeasesPerIdentity).
func holderFor(c *caller, label string) string { return authz.HolderFor(c, label) }

// loadPolicy returns the policy c turns on, checked, or nil.
func (c Config) loadPolicy() (*Policy, error) {
	var p *Policy
	source := "Config.Policy"
	switch {
	case c.Policy != nil:
		var err error
		if p, err = authz.Compile(c.Policy); err != nil {
			return nil, err
		}
	case c.PolicyFile != "":
		var worldReadable bool
		var err error
		if p, worldReadable, err = authz.LoadFile(c.PolicyFile); err != nil {
			return nil, err
		}
		source = c.PolicyFile
		if worldReadable {
			c.Logger.Warn("the policy file is readable by every user on this host, and it holds bearer tokens: chmod o-r it", "file", c.PolicyFile)
		}
	default:
		return nil, nil
	}
	ids, peers := p.Names()
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
	if c != nil && c.Name != "" {
		return "identity:" + c.Name
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
	if n.policy == nil || c == nil || c.All() {
		return nil
	}
	held := 0
	n.sm.read(func(st *fsm.State) {
		if l, ok := st.Lease(resource); ok && authz.HoldsFor(l.Holder, c.Name) {
			held = -1
			return
		}
		held = st.HeldBy(c.Name)
	})
	if max := n.cfg.MaxLeasesPerIdentity; held >= max {
		n.log.Warn("lease limit reached", "identity", c.Name, "leases", held, "max", max)
		return fmt.Errorf("%w: %q holds %d leases (max %d per identity)", ErrLimit, c.Name, held, max)
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
