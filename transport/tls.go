package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// DefaultPeerIdentity is the URI SAN that marks a node's certificate as a
// peer's. Client certificates must not carry it: a certificate without it
// cannot call the RaftTransport service (see PeerInterceptors).
const DefaultPeerIdentity = "leasefence://peer"

// ErrTLSConfig is returned by TLSFiles.Check and LoadTLS when the TLS files
// are half configured (a certificate without its key, a key without its
// certificate, a certificate without a CA, a CA without a certificate) or
// cannot be loaded. The wrapping error says which.
var ErrTLSConfig = errors.New("transport: tls config")

// TLSFiles names the PEM files of mutual TLS on the node's one gRPC port.
// All three are given, or none (plaintext).
type TLSFiles struct {
	// CertFile is this node's certificate chain. It must carry the peer
	// identity, and be valid for serving (ServerAuth) and for dialling other
	// nodes (ClientAuth).
	CertFile string
	// KeyFile is the private key of CertFile.
	KeyFile string
	// CAFile holds the CA certificates that sign node and client
	// certificates. Every caller must present a certificate signed by one.
	CAFile string
}

// Enabled reports whether any file is named.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// Check reports a half configuration without reading any file.
func (f TLSFiles) Check() error {
	var errs []error
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		errs = append(errs, fmt.Errorf("%w: tls cert %s given without its key (--tls-key)", ErrTLSConfig, f.CertFile))
	case f.KeyFile != "" && f.CertFile == "":
		errs = append(errs, fmt.Errorf("%w: tls key %s given without its certificate (--tls-cert)", ErrTLSConfig, f.KeyFile))
	}
	switch {
	case f.CertFile != "" && f.CAFile == "":
		errs = append(errs, fmt.Errorf("%w: tls cert given without a CA (--tls-ca): callers' certificates could not be verified", ErrTLSConfig))
	case f.CAFile != "" && f.CertFile == "" && f.KeyFile == "":
		errs = append(errs, fmt.Errorf("%w: tls ca %s given without a certificate and key (--tls-cert, --tls-key)", ErrTLSConfig, f.CAFile))
	}
	return errors.Join(errs...)
}

// CheckPeerIdentity reports whether id can serve as a peer identity: an
// absolute URI (scheme://...), matched exactly against URI SANs.
func CheckPeerIdentity(id string) error {
	u, err := url.Parse(id)
	if err != nil || u.Scheme == "" || strings.ContainsAny(id, " \t\n") {
		return fmt.Errorf("%w: peer identity %q is not an absolute URI (e.g. %s)", ErrTLSConfig, id, DefaultPeerIdentity)
	}
	return nil
}

// LoadTLS reads f and returns the node's two TLS configurations: server
// (mutual TLS, TLS 1.3 at least, a client certificate signed by the CA
// required) and peer (for dialling other nodes with this node's
// certificate; the dialled node must show a certificate signed by the CA
// that carries peerIdentity). It refuses a half configuration, a key that
// does not match the certificate, an expired or not yet valid certificate,
// and a node certificate without peerIdentity (other nodes would refuse its
// Raft traffic). Empty peerIdentity means DefaultPeerIdentity.
//
// The files are read once; rotating certificates needs a restart.
func LoadTLS(f TLSFiles, peerIdentity string) (server, peerCfg *tls.Config, err error) {
	if err := f.Check(); err != nil {
		return nil, nil, err
	}
	if !f.Enabled() {
		return nil, nil, fmt.Errorf("%w: no tls files given", ErrTLSConfig)
	}
	if peerIdentity == "" {
		peerIdentity = DefaultPeerIdentity
	}
	if err := CheckPeerIdentity(peerIdentity); err != nil {
		return nil, nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: load cert %s and key %s: %v", ErrTLSConfig, f.CertFile, f.KeyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("%w: parse cert %s: %v", ErrTLSConfig, f.CertFile, err)
		}
	}
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return nil, nil, fmt.Errorf("%w: cert %s is valid only from %s to %s", ErrTLSConfig, f.CertFile,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if !HasPeerIdentity(leaf, peerIdentity) {
		return nil, nil, fmt.Errorf("%w: cert %s does not carry the peer identity %s (a URI SAN): other nodes would refuse its Raft traffic",
			ErrTLSConfig, f.CertFile, peerIdentity)
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read ca: %v", ErrTLSConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%w: ca %s holds no PEM certificate", ErrTLSConfig, f.CAFile)
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	peerCfg = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		// Runs after the chain and the host name are verified: Raft traffic,
		// forwarded calls and joins go only to nodes.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !HasPeerIdentity(cs.PeerCertificates[0], peerIdentity) {
				return fmt.Errorf("transport: %s does not present a peer certificate (no URI SAN %s)", cs.ServerName, peerIdentity)
			}
			return nil
		},
	}
	return server, peerCfg, nil
}

// HasPeerIdentity reports whether cert carries the URI SAN id.
func HasPeerIdentity(cert *x509.Certificate, id string) bool {
	for _, u := range cert.URIs {
		if u.String() == id {
			return true
		}
	}
	return false
}

// peerMethodPrefixes start the full method names of the services reserved
// to peers: the Raft transport, and Calls (forwarded calls, which carry the
// identity of the caller they were forwarded for).
var peerMethodPrefixes = []string{
	"/" + transportpb.RaftTransport_ServiceDesc.ServiceName + "/",
	"/" + transportpb.Calls_ServiceDesc.ServiceName + "/",
}

func peerOnly(method string) bool {
	for _, p := range peerMethodPrefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// PeerInterceptors returns the server interceptors that let only peers reach
// the RaftTransport and Calls services: a call to them whose verified client
// certificate does not carry the URI SAN peerIdentity (or that comes without TLS) is
// refused with codes.PermissionDenied and logged with the certificate's
// subject. Other services pass through untouched. Install them only on a
// server that requires verified client certificates (LoadTLS's server
// configuration). Empty peerIdentity means DefaultPeerIdentity.
func PeerInterceptors(peerIdentity string, log hclog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if peerIdentity == "" {
		peerIdentity = DefaultPeerIdentity
	}
	check := func(ctx context.Context, method string) error {
		if !peerOnly(method) {
			return nil
		}
		subject := "no certificate"
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
				leaf := ti.State.VerifiedChains[0][0]
				if HasPeerIdentity(leaf, peerIdentity) {
					return nil
				}
				subject = leaf.Subject.String()
			}
		}
		if log != nil {
			log.Warn("peer-only call refused: not a peer certificate", "method", method, "subject", subject)
		}
		return status.Errorf(codes.PermissionDenied, "%s is reserved to cluster nodes (certificate without %s)", method, peerIdentity)
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}
