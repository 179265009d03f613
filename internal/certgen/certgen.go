// Package certgen makes the certificates of a mutual-TLS leasefence cluster
// with Go's crypto only: a CA, one peer certificate per node (carrying the
// peer identity URI SAN) and client certificates (without it). It backs
// `make certs` (cmd/certgen) and the TLS tests, which build their
// certificates in memory. Keys are ECDSA P-256.
//
// These certificates are for development and tests: the CA key is written
// next to the certificates, unencrypted.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM []byte
	KeyPEM  []byte
}

// LeafOptions describes a certificate to issue.
type LeafOptions struct {
	// CommonName is the subject's CN (a node id, or a client name).
	CommonName string
	// PeerIdentity, when set, is added as a URI SAN and the certificate is
	// valid for serving as well as dialling (a node's). Empty issues a client
	// certificate (ClientAuth only).
	PeerIdentity string
	// DNSNames and IPs are the host names and addresses a node serves on.
	DNSNames []string
	IPs      []net.IP
	// NotBefore and NotAfter bound validity; zero means from an hour ago
	// for Validity.
	NotBefore, NotAfter time.Time
}

// Validity is the default lifetime of generated certificates.
const Validity = 365 * 24 * time.Hour

// NewCA makes a self-signed CA named name, valid from an hour ago for
// Validity.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"leasefence"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certgen: ca: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// Issue signs a leaf certificate described by o.
func (ca *CA) Issue(o LeafOptions) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: []string{"leasefence"}},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(Validity)
	}
	if o.PeerIdentity != "" {
		u, err := url.Parse(o.PeerIdentity)
		if err != nil {
			return nil, fmt.Errorf("certgen: peer identity: %w", err)
		}
		tmpl.URIs = []*url.URL{u}
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certgen: issue %s: %w", o.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// Peer issues a node certificate for id with the SANs of a loopback
// cluster (127.0.0.1, ::1, localhost) and peerIdentity.
func (ca *CA) Peer(id, peerIdentity string) (*Leaf, error) {
	return ca.Issue(LeafOptions{
		CommonName:   id,
		PeerIdentity: peerIdentity,
		DNSNames:     []string{"localhost"},
		IPs:          []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
}

// Client issues a client certificate named name, without the peer marker.
func (ca *CA) Client(name string) (*Leaf, error) {
	return ca.Issue(LeafOptions{CommonName: name})
}

// Write stores the leaf as dir/name.crt and dir/name.key (0600) and returns
// the two paths.
func (l *Leaf) Write(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, l.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// Write stores the CA as dir/ca.crt and dir/ca.key (0600) and returns the
// two paths.
func (ca *CA) Write(dir string) (certFile, keyFile string, err error) {
	return (&Leaf{CertPEM: ca.CertPEM, KeyPEM: ca.KeyPEM}).Write(dir, "ca")
}

// WriteCluster makes dir and writes into it a new CA (ca.crt, ca.key), a
// peer certificate per node (<id>.crt, <id>.key) with peerIdentity, and a
// client certificate per client name (<name>.crt, <name>.key). It returns
// the files written, in that order.
func WriteCluster(dir string, nodes, clients []string, peerIdentity string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	ca, err := NewCA("leasefence dev CA")
	if err != nil {
		return nil, err
	}
	var files []string
	c, k, err := ca.Write(dir)
	if err != nil {
		return nil, err
	}
	files = append(files, c, k)
	issue := func(name string, peer bool) error {
		var l *Leaf
		var err error
		if peer {
			l, err = ca.Peer(name, peerIdentity)
		} else {
			l, err = ca.Client(name)
		}
		if err != nil {
			return err
		}
		c, k, err := l.Write(dir, name)
		files = append(files, c, k)
		return err
	}
	for _, id := range nodes {
		if err := issue(id, true); err != nil {
			return files, err
		}
	}
	for _, name := range clients {
		if err := issue(name, false); err != nil {
			return files, err
		}
	}
	return files, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("certgen: crypto/rand failed: " + err.Error())
	}
	return n
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
