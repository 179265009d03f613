package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/transport"
	"github.com/leasefence/leasefence/transport/transportpb"
)

// tlsFixture holds a CA and the files of a three-node mutual-TLS cluster,
// made in the test (nothing committed).
type tlsFixture struct {
	dir    string
	ca     *certgen.CA
	caFile string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFixture{dir: t.TempDir(), ca: ca}
	if f.caFile, _, err = ca.Write(f.dir); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		leaf, err := ca.Peer(id, transport.DefaultPeerIdentity)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := leaf.Write(f.dir, id); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// files returns the TLS files of node id.
func (f *tlsFixture) files(id string) transport.TLSFiles {
	return transport.TLSFiles{
		CertFile: filepath.Join(f.dir, id+".crt"),
		KeyFile:  filepath.Join(f.dir, id+".key"),
		CAFile:   f.caFile,
	}
}

// dial connects to addr with a TLS client that trusts the fixture's CA and
// presents leaf (none when nil).
func (f *tlsFixture) dial(t *testing.T, addr string, leaf *certgen.Leaf) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.ca.CertPEM)
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	if leaf != nil {
		cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		// Present it whatever CAs the server names, as an attacker would
		// (Go's default sends only a certificate the server's CAs signed).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func acquireOn(t *testing.T, conn *grpc.ClientConn, resource string) (*api.AcquireResponse, error) {
	t.Helper()
	ctx := ctxT(t)
	return api.NewLeaseServiceClient(conn).Acquire(ctx, &api.AcquireRequest{
		Resource: resource, Holder: "tls-test", Ttl: durationpb.New(5 * time.Second),
	})
}

// TestMutualTLSAdmitsCertifiedClientsAndKeepsRaftToPeers runs a three-node
// cluster with mutual TLS on its one port and checks both sides of every
// rule: a client certificate of the cluster's CA is served (through a
// follower, so forwarding runs over the peers' TLS too); no certificate,
// another CA's and an expired one are refused at the handshake; a client
// certificate calling the Raft transport gets PermissionDenied while the
// nodes replicate over it.
func TestMutualTLSAdmitsCertifiedClientsAndKeepsRaftToPeers(t *testing.T) {
	fx := newTLSFixture(t)
	tc := newTestCluster(t, 3, func(c *Config) { c.TLS = fx.files(c.ID) })
	if st, err := tc.nodes[0].admin.Status(ctxT(t), &api.StatusRequest{}); err != nil || len(st.Unsafe) != 0 {
		t.Fatalf("a TLS node reports unsafe features %v (%v)", st.GetUnsafe(), err)
	}
	_, follower := tc.follower()
	clientCert, err := fx.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("client certificate of the cluster CA is served", func(t *testing.T) {
		res, err := acquireOn(t, fx.dial(t, follower.Addr(), clientCert), "tls/served")
		if err != nil {
			t.Fatalf("acquire with a client certificate: %v", err)
		}
		if res.GetLease().GetToken() == 0 {
			t.Fatalf("no token in %v", res)
		}
	})

	refused := func(t *testing.T, leaf *certgen.Leaf, resource string) {
		t.Helper()
		_, err := acquireOn(t, fx.dial(t, follower.Addr(), leaf), resource)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("acquire: got %v, want Unavailable (refused at the handshake)", err)
		}
		t.Logf("refused: %v", err)
		// Nothing reached the state machine: a certified client finds the
		// resource free and gets the next token of the scope, the first.
		res, err := acquireOn(t, fx.dial(t, follower.Addr(), clientCert), resource)
		if err != nil || res.GetLease().GetToken() != 1 {
			t.Fatalf("after the refused call: %v, %v", res, err)
		}
	}
	t.Run("client without a certificate is refused", func(t *testing.T) {
		refused(t, nil, "tls/no-cert")
	})
	t.Run("client certificate of another CA is refused", func(t *testing.T) {
		other, err := certgen.NewCA("other CA")
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := other.Client("client")
		if err != nil {
			t.Fatal(err)
		}
		refused(t, leaf, "tls/other-ca")
	})
	t.Run("expired client certificate is refused", func(t *testing.T) {
		leaf, err := fx.ca.Issue(certgen.LeafOptions{
			CommonName: "client", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, leaf, "tls/expired")
	})

	t.Run("client certificate cannot call the raft transport", func(t *testing.T) {
		rt := transportpb.NewRaftTransportClient(fx.dial(t, follower.Addr(), clientCert))
		ctx := ctxT(t)
		if _, err := rt.AppendEntries(ctx, &transportpb.AppendEntriesRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("AppendEntries with a client certificate: got %v, want PermissionDenied", err)
		}
		if _, err := rt.RequestVote(ctx, &transportpb.RequestVoteRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("RequestVote with a client certificate: got %v, want PermissionDenied", err)
		}
		stream, err := rt.InstallSnapshot(ctx)
		if err == nil {
			_, err = stream.CloseAndRecv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("InstallSnapshot stream with a client certificate: got %v, want PermissionDenied", err)
		}
		// The other side: a peer certificate passes the interceptor and
		// reaches the transport, which refuses the empty request itself.
		peerLeaf, err := fx.ca.Peer("n9", transport.DefaultPeerIdentity)
		if err != nil {
			t.Fatal(err)
		}
		prt := transportpb.NewRaftTransportClient(fx.dial(t, follower.Addr(), peerLeaf))
		if _, err := prt.AppendEntries(ctx, &transportpb.AppendEntriesRequest{}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("empty AppendEntries with a peer certificate: got %v, want InvalidArgument from the transport", err)
		}
	})

	t.Run("client certificate cannot send calls as a peer", func(t *testing.T) {
		// Calls carries forwarded calls with the identity they were
		// forwarded for: only a peer may claim one.
		stream, err := transportpb.NewCallsClient(fx.dial(t, follower.Addr(), clientCert)).Batch(ctxT(t))
		if err == nil {
			err = stream.Send(&transportpb.CallBatch{Calls: []*transportpb.Call{{Id: 1, Method: api.LeaseService_Acquire_FullMethodName}}})
		}
		// Send reports io.EOF when the server has already ended the
		// stream; the refusal itself is the status Recv returns.
		if err == nil || errors.Is(err, io.EOF) {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("Calls.Batch with a client certificate: got %v, want PermissionDenied", err)
		}
	})

	t.Run("nodes replicate over mutual TLS", func(t *testing.T) {
		if _, err := acquireOn(t, fx.dial(t, follower.Addr(), clientCert), "tls/replicated"); err != nil {
			t.Fatal(err)
		}
		tc.waitAllApplied(t)
	})
}

// TestHalfConfiguredTLSRefusesToStart checks that Start refuses every
// incomplete or unusable TLS setup with a message that names the problem,
// and that the complete one starts.
func TestHalfConfiguredTLSRefusesToStart(t *testing.T) {
	fx := newTLSFixture(t)
	full := fx.files("n1")
	clientLeaf, err := fx.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := clientLeaf.Write(fx.dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := fx.ca.Issue(certgen.LeafOptions{
		CommonName: "n1", PeerIdentity: transport.DefaultPeerIdentity,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, err := expired.Write(fx.dir, "expired")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files transport.TLSFiles
		peer  string
		want  string
	}{
		{"cert without key", transport.TLSFiles{CertFile: full.CertFile, CAFile: full.CAFile}, "", "without its key"},
		{"key without cert", transport.TLSFiles{KeyFile: full.KeyFile, CAFile: full.CAFile}, "", "without its certificate"},
		{"cert and key without ca", transport.TLSFiles{CertFile: full.CertFile, KeyFile: full.KeyFile}, "", "without a CA"},
		{"ca alone", transport.TLSFiles{CAFile: full.CAFile}, "", "without a certificate and key"},
		{"key of another cert", transport.TLSFiles{CertFile: full.CertFile, KeyFile: fx.files("n2").KeyFile, CAFile: full.CAFile}, "", "private key does not match"},
		{"missing ca file", transport.TLSFiles{CertFile: full.CertFile, KeyFile: full.KeyFile, CAFile: filepath.Join(fx.dir, "nope.crt")}, "", "read ca"},
		{"client cert as node cert", transport.TLSFiles{CertFile: clientCert, KeyFile: clientKey, CAFile: full.CAFile}, "", "does not carry the peer identity"},
		{"expired node cert", transport.TLSFiles{CertFile: expiredCert, KeyFile: expiredKey, CAFile: full.CAFile}, "", "is valid only from"},
		{"other peer identity", full, "spiffe://example.org/leasefence", "does not carry the peer identity"},
		{"peer identity not a uri", full, "peer", "not an absolute URI"},
	}
	addr := freeAddrs(t, 1)[0]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
			cfg.Bootstrap = map[string]string{"n1": addr}
			cfg.Logger = testLogger(t, "n1")
			cfg.TLS, cfg.PeerIdentity = c.files, c.peer
			n, err := Start(cfg)
			if err == nil {
				n.Close()
				t.Fatal("started with a bad TLS configuration")
			}
			if !errors.Is(err, transport.ErrTLSConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: want transport.ErrTLSConfig mentioning %q", err, c.want)
			}
		})
	}
	t.Run("complete configuration starts", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
		cfg.Bootstrap = map[string]string{"n1": addr}
		cfg.Logger = testLogger(t, "n1")
		cfg.TLS = full
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.Close()
	})
}
