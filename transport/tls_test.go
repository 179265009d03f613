package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/internal/certgen"
)

// peerFiles writes a test CA and a peer certificate for n1 (with
// DefaultPeerIdentity) into a temporary dir and returns the CA and the
// files LoadTLS reads.
func peerFiles(t *testing.T) (*certgen.CA, TLSFiles) {
	t.Helper()
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, _, err := ca.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := ca.Peer("n1", DefaultPeerIdentity)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := self.Write(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return ca, TLSFiles{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}
}

// A node dials only nodes: its peer TLS configuration refuses a server whose
// certificate, though signed by the cluster's CA, lacks the peer identity,
// and accepts one that carries it.
func TestPeerTLSDialsOnlyServersWithThePeerIdentity(t *testing.T) {
	ca, files := peerFiles(t)
	_, peerCfg, err := LoadTLS(files, "")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)

	serve := func(t *testing.T, leaf *certgen.Leaf) string {
		cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
			Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		t.Cleanup(func() { l.Close(); <-done })
		go func() {
			defer close(done)
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		return l.Addr().String()
	}
	dial := func(addr string) error {
		c, err := tls.DialWithDialer(&net.Dialer{}, "tcp", addr, peerCfg.Clone())
		if err == nil {
			c.Close()
		}
		return err
	}

	other, err := ca.Peer("impostor", "leasefence://not-a-peer")
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(serve(t, other)); err == nil || !strings.Contains(err.Error(), "does not present a peer certificate") {
		t.Fatalf("dialling a server without the peer identity: %v", err)
	}
	node, err := ca.Peer("n2", DefaultPeerIdentity)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(serve(t, node)); err != nil {
		t.Fatalf("dialling a peer: %v", err)
	}
}

func TestTLSFilesCheckNamesTheMissingPiece(t *testing.T) {
	cases := []struct {
		files TLSFiles
		want  string
	}{
		{TLSFiles{CertFile: "c", CAFile: "ca"}, "without its key"},
		{TLSFiles{KeyFile: "k", CAFile: "ca"}, "without its certificate"},
		{TLSFiles{CertFile: "c", KeyFile: "k"}, "without a CA"},
		{TLSFiles{CAFile: "ca"}, "without a certificate and key"},
	}
	for _, c := range cases {
		err := c.files.Check()
		if !errors.Is(err, ErrTLSConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.files, err, c.want)
		}
	}
	for _, ok := range []TLSFiles{{}, {CertFile: "c", KeyFile: "k", CAFile: filepath.Join("x", "ca")}} {
		if err := ok.Check(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}
