package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/authz/authztest"
)

const (
	aliceToken = authztest.AliceToken
	bobToken   = authztest.BobToken
	rootToken  = authztest.RootToken
	testPolicy = authztest.Policy
)

func mustPolicy(t testing.TB, s string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// bearer is a per-RPC credential over plaintext, for tests.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// dialAs dials node i presenting token (none when empty).
func (tc *testCluster) dialAs(i int, token string) (api.LeaseServiceClient, api.ClusterServiceClient) {
	tc.t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(tc.cfgs[i].Listen, opts...)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { conn.Close() })
	return api.NewLeaseServiceClient(conn), api.NewClusterServiceClient(conn)
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

func authzAcquire(resource, holder string) *api.AcquireRequest {
	return &api.AcquireRequest{Resource: resource, Holder: holder, Ttl: durationpb.New(5 * time.Second)}
}

func TestPolicyConfinesClientsToTheirPrefixes(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.Policy = mustPolicy(t, testPolicy) })
	fi, _ := tc.follower()
	li, _ := tc.leader()
	ctx := ctxT(t)
	// Through a follower: every decision is made there and again at the
	// leader, which checks the forwarded token itself.
	alice, aliceAdmin := tc.dialAs(fi, aliceToken)
	bob, _ := tc.dialAs(fi, bobToken)
	_, rootAdmin := tc.dialAs(fi, rootToken)

	// acquire
	ar, err := alice.Acquire(ctx, authzAcquire("a/x", "worker-1"))
	if err != nil {
		t.Fatalf("alice acquire a/x: %v", err)
	}
	if got := ar.Lease.Holder; got != "alice|worker-1" {
		t.Errorf("holder %q, want the identity before the label", got)
	}
	_, err = alice.Acquire(ctx, authzAcquire("b/x", ""))
	wantCode(t, "alice acquire b/x", err, codes.PermissionDenied)
	req := authzAcquire("a/y", "")
	req.Scope = "b/scope"
	_, err = alice.Acquire(ctx, req)
	wantCode(t, "alice acquire a/y in bob's scope", err, codes.PermissionDenied)

	// renew and release: the id is not enough outside one's prefixes.
	br, err := bob.Acquire(ctx, authzAcquire("b/y", ""))
	if err != nil {
		t.Fatalf("bob acquire b/y: %v", err)
	}
	// Let the follower apply bob's grant, so that it decides itself.
	fol := tc.nodes[fi]
	eventually(t, 15*time.Second, "follower applies the grant", func() bool {
		return fol.AppliedIndex() >= tc.nodes[li].AppliedIndex()
	})
	_, err = alice.Renew(ctx, &api.RenewRequest{LeaseId: br.Lease.Id})
	wantCode(t, "alice renew bob's lease", err, codes.PermissionDenied)
	_, err = alice.Release(ctx, &api.ReleaseRequest{LeaseId: br.Lease.Id})
	wantCode(t, "alice release bob's lease", err, codes.PermissionDenied)
	// At the leader too (no follower view in the way).
	aliceAtLeader, _ := tc.dialAs(li, aliceToken)
	_, err = aliceAtLeader.Renew(ctx, &api.RenewRequest{LeaseId: br.Lease.Id})
	wantCode(t, "alice renew bob's lease at the leader", err, codes.PermissionDenied)
	if _, err := alice.Renew(ctx, &api.RenewRequest{LeaseId: ar.Lease.Id}); err != nil {
		t.Errorf("alice renew her lease: %v", err)
	}
	if _, err := bob.Renew(ctx, &api.RenewRequest{LeaseId: br.Lease.Id}); err != nil {
		t.Errorf("bob renew his lease: %v", err)
	}
	// KeepAlive renews per message: bob's lease refused, alice's renewed.
	ka, err := alice.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq, id := range [][]byte{br.Lease.Id, ar.Lease.Id} {
		if err := ka.Send(&api.KeepAliveRequest{Seq: uint64(seq), LeaseId: id}); err != nil {
			t.Fatal(err)
		}
		resp, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		want := codes.PermissionDenied
		if seq == 1 {
			want = codes.OK
		}
		if got := codes.Code(resp.Code); got != want {
			t.Errorf("keep-alive of lease %d: %v (%s), want %v", seq, got, resp.Message, want)
		}
	}
	ka.CloseSend()
	if r, err := bob.Release(ctx, &api.ReleaseRequest{LeaseId: br.Lease.Id}); err != nil || !r.Released {
		t.Errorf("bob release his lease: %v, %v", r, err)
	}

	// get
	if _, err := alice.Get(ctx, &api.GetRequest{Resource: "a/x"}); err != nil {
		t.Errorf("alice get a/x: %v", err)
	}
	_, err = alice.Get(ctx, &api.GetRequest{Resource: "b/y", Stale: true})
	wantCode(t, "alice stale get b/y", err, codes.PermissionDenied)

	// watch
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := alice.Watch(wctx, &api.WatchRequest{Key: "a/", Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Acquire(ctx, authzAcquire("a/w", "")); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := ws.Recv() // earlier renewals of a/x may come first
		if err != nil {
			t.Fatalf("alice watch a/: %v", err)
		}
		if ev.Lease.Resource == "a/w" {
			break
		}
	}
	for _, wr := range []*api.WatchRequest{{Key: "b/", Prefix: true}, {Key: "", Prefix: true}, {Key: "b/y"}} {
		s, err := alice.Watch(wctx, wr)
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, "alice watch "+wr.Key, err, codes.PermissionDenied)
	}

	// unknown or missing credentials
	for name, tok := range map[string]string{"unknown token": "not-a-token-0123456789", "no token": ""} {
		c, cc := tc.dialAs(fi, tok)
		_, err := c.Acquire(ctx, authzAcquire("a/z", ""))
		wantCode(t, name+" acquire", err, codes.PermissionDenied)
		_, err = cc.Status(ctx, &api.StatusRequest{})
		wantCode(t, name+" status", err, codes.PermissionDenied)
	}

	// administration
	if _, err := aliceAdmin.Status(ctx, &api.StatusRequest{}); err != nil {
		t.Errorf("alice status: %v", err)
	}
	_, err = aliceAdmin.TransferLeadership(ctx, &api.TransferLeadershipRequest{})
	wantCode(t, "alice transfer leadership", err, codes.PermissionDenied)
	self := &api.JoinRequest{Id: tc.cfgs[fi].ID, Addr: tc.cfgs[fi].Listen}
	_, err = aliceAdmin.Join(ctx, self)
	wantCode(t, "alice join", err, codes.PermissionDenied)
	_, err = aliceAdmin.Remove(ctx, &api.RemoveRequest{Id: "n9"})
	wantCode(t, "alice remove", err, codes.PermissionDenied)
	snap, err := aliceAdmin.Snapshot(ctx, &api.SnapshotRequest{})
	if err == nil {
		_, err = snap.Recv()
	}
	wantCode(t, "alice snapshot", err, codes.PermissionDenied)
	if _, err := rootAdmin.Join(ctx, self); err != nil {
		t.Errorf("root join (a no-op for a member): %v", err)
	}
	_, err = rootAdmin.Remove(ctx, &api.RemoveRequest{Id: "n9"})
	wantCode(t, "root remove of a stranger", err, codes.NotFound)
	snap, err = rootAdmin.Snapshot(ctx, &api.SnapshotRequest{})
	if err == nil {
		_, err = snap.Recv()
	}
	if err != nil {
		t.Errorf("root snapshot: %v", err)
	}
}

func TestLimitsRefuseWithResourceExhausted(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Policy = mustPolicy(t, testPolicy)
		c.MaxLeasesPerIdentity = 2
		c.MaxWaitersPerResource = 2
		c.MaxWatchersPerClient = 2
	})
	n := tc.nodes[0]
	ctx := ctxT(t)
	alice, _ := tc.dialAs(0, aliceToken)
	root, _ := tc.dialAs(0, rootToken)

	// leases per identity
	a1, err := alice.Acquire(ctx, authzAcquire("a/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	req2 := authzAcquire("a/2", "w")
	req2.RequestId = "req-a2"
	a2, err := alice.Acquire(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.Acquire(ctx, authzAcquire("a/3", ""))
	wantCode(t, "third lease", err, codes.ResourceExhausted)
	// A retry of a granted Acquire (same request id) still replays at the limit.
	if r, err := alice.Acquire(ctx, req2); err != nil || !r.Replayed || r.Lease.Token != a2.Lease.Token {
		t.Errorf("retry at the limit: %v, %v", r, err)
	}
	if _, err := root.Acquire(ctx, authzAcquire("a/3", "")); err != nil {
		t.Errorf("another identity is not counted against alice: %v", err)
	}
	if _, err := alice.Release(ctx, &api.ReleaseRequest{LeaseId: a1.Lease.Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Acquire(ctx, authzAcquire("a/4", "")); err != nil {
		t.Errorf("a lease after a release: %v", err)
	}

	// waiters per resource (a/3 is root's)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			r := authzAcquire("a/3", "")
			r.Wait = true
			_, err := root.Acquire(wctx, r)
			errs <- err
		}()
	}
	eventually(t, 15*time.Second, "two waiters", func() bool { return n.waiters.waiting("a/3") == 2 })
	r := authzAcquire("a/3", "")
	r.Wait = true
	_, err = root.Acquire(ctx, r)
	wantCode(t, "third waiter", err, codes.ResourceExhausted)
	cancel()
	for i := 0; i < 2; i++ {
		wantCode(t, "cancelled waiter", <-errs, codes.Canceled)
	}
	eventually(t, 15*time.Second, "waiters gone", func() bool { return n.waiters.waiting("a/3") == 0 })

	// watchers per identity, across connections
	alice2, _ := tc.dialAs(0, aliceToken)
	sctx, stop := context.WithCancel(ctx)
	for _, c := range []api.LeaseServiceClient{alice, alice2} {
		if _, err := c.Watch(sctx, &api.WatchRequest{Key: "a/", Prefix: true}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "two watchers", func() bool { return n.watchers.count("identity:alice") == 2 })
	s, err := alice2.Watch(ctx, &api.WatchRequest{Key: "a/x"})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, "third watcher", err, codes.ResourceExhausted)
	stop()
	eventually(t, 15*time.Second, "watchers gone", func() bool { return n.watchers.count("identity:alice") == 0 })
	ok, cancelOK := context.WithCancel(ctx)
	defer cancelOK()
	if _, err := alice.Watch(ok, &api.WatchRequest{Key: "a/x"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "a watcher after others left", func() bool { return n.watchers.count("identity:alice") == 1 })
}

func TestWatchersPerConnectionWithoutPolicy(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxWatchersPerClient = 1 })
	n := tc.nodes[0]
	ctx := ctxT(t)
	c := tc.client(0)
	if _, err := c.Watch(ctx, &api.WatchRequest{Key: "x"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "one watcher", func() bool { return n.watchers.total() == 1 })
	s, err := c.Watch(ctx, &api.WatchRequest{Key: "y"})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, "second watcher on one connection", err, codes.ResourceExhausted)
	// Another connection has its own allowance; everything else is allowed.
	other := tc.client(0)
	if _, err := other.Watch(ctx, &api.WatchRequest{Key: "y"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "two watchers on two connections", func() bool { return n.watchers.total() == 2 })
	if _, err := other.Acquire(ctx, authzAcquire("anything", "")); err != nil {
		t.Errorf("without a policy everything is allowed: %v", err)
	}
}

// tlsPeer is a gRPC peer with a verified client certificate.
func tlsPeer(ctx context.Context, cn string, uris ...string) context.Context {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		leaf.URIs = append(leaf.URIs, pu)
	}
	st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
}

func TestIdentityFromCertificateAndForwardedCalls(t *testing.T) {
	n := &Node{policy: mustPolicy(t, testPolicy), log: testLogger(t, "authz")}
	bg := context.Background()
	incoming := func(ctx context.Context, kv ...string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want string // identity, or "" for a refusal
	}{
		{"URI SAN names the identity", tlsPeer(bg, "ignored", "spiffe://example.org/carol"), "spiffe://example.org/carol"},
		{"CN when there is no URI SAN", tlsPeer(bg, "alice"), "alice"},
		{"unknown certificate", tlsPeer(bg, "mallory"), ""},
		{"a token wins over the certificate", incoming(tlsPeer(bg, "alice"), "authorization", "Bearer "+bobToken), "bob"},
		{"a peer forwards its caller's identity", incoming(tlsPeer(bg, "node-cert"), forwardedKey, "1", identityKey, "alice"), "alice"},
		{"a peer forwarding an unknown identity", incoming(tlsPeer(bg, "node-cert"), forwardedKey, "1", identityKey, "mallory"), ""},
		{"a non-peer cannot claim an identity", incoming(tlsPeer(bg, "alice"), forwardedKey, "1", identityKey, "root"), "alice"},
		{"a plaintext caller cannot claim an identity", incoming(peer.NewContext(bg, &peer.Peer{}), forwardedKey, "1", identityKey, "root"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := n.identify(tt.ctx)
			if tt.want == "" {
				wantCode(t, "identify", toStatus(err), codes.PermissionDenied)
				return
			}
			if err != nil || c.Name != tt.want {
				t.Fatalf("got %+v, %v; want %s", c, err, tt.want)
			}
		})
	}
	// A peer itself may do everything; carol only within c/.
	c, err := n.identify(tlsPeer(bg, "node-cert"))
	if err != nil || !c.All() {
		t.Fatalf("peer: %+v, %v", c, err)
	}
	if _, _, err := n.authorize(tlsPeer(bg, "", "spiffe://example.org/carol"), permResource, "a/x"); !strings.Contains(err.Error(), "outside its prefixes") {
		t.Fatalf("carol on a/x: %v", err)
	}
}

// TestPolicyWithMutualTLSNamesCallersByCertificate runs the policy over real
// mutual TLS: the caller is named by its certificate, and a call forwarded
// by a follower reaches the leader with that identity (the leader believes
// it because the follower dials with a peer certificate).
func TestPolicyWithMutualTLSNamesCallersByCertificate(t *testing.T) {
	fx := newTLSFixture(t)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.TLS = fx.files(c.ID)
		c.Policy = mustPolicy(t, testPolicy)
	})
	_, follower := tc.follower()
	alice, err := fx.ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := fx.ca.Client("mallory")
	if err != nil {
		t.Fatal(err)
	}
	conn := fx.dial(t, follower.Addr(), alice)
	res, err := acquireOn(t, conn, "a/tls")
	if err != nil {
		t.Fatalf("alice (by certificate) acquire a/tls through a follower: %v", err)
	}
	if got := res.Lease.Holder; got != "alice|tls-test" {
		t.Errorf("holder %q: the leader did not get alice's identity", got)
	}
	_, err = acquireOn(t, conn, "b/tls")
	wantCode(t, "alice acquire b/tls", err, codes.PermissionDenied)
	_, err = acquireOn(t, fx.dial(t, follower.Addr(), mallory), "a/tls2")
	wantCode(t, "a certificate the policy does not name", err, codes.PermissionDenied)
	_, err = api.NewClusterServiceClient(conn).TransferLeadership(ctxT(t), &api.TransferLeadershipRequest{})
	wantCode(t, "alice transfer leadership", err, codes.PermissionDenied)
}

func TestBadPolicyFileStopsTheNodeAtStart(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/policy.json"
	if err := os.WriteFile(file, []byte(`{"identities": {"a": {"tokens": ["short"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Listen = "n1", dir, "127.0.0.1:0"
	cfg.Insecure = true
	cfg.Logger = testLogger(t, "n1")
	for _, f := range []string{file, dir + "/missing.json"} {
		cfg.PolicyFile = f
		n, err := Start(cfg)
		if err == nil {
			n.Close()
			t.Fatalf("%s: started", f)
		}
		if !strings.Contains(err.Error(), "policy") {
			t.Errorf("%s: error %q does not say it is the policy", f, err)
		}
	}
}
