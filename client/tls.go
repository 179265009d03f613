package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// LoadTLS builds a Config.TLS for a cluster that runs mutual TLS (leased
// --tls-*) from PEM files: caFile holds the CA certificates that sign the
// nodes' certificates (required), certFile and keyFile this client's
// certificate and key (both or neither; a cluster with mutual TLS refuses a
// client without one at the handshake). TLS 1.3 is the minimum. The node
// certificate is checked against the endpoint's host, so endpoints must
// name a host or address the node certificate carries (`make certs` puts
// 127.0.0.1 and localhost in it).
//
// The files are read once; a client built from the result keeps using
// those certificates until it is rebuilt.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	switch {
	case certFile != "" && keyFile == "":
		return nil, fmt.Errorf("%w: certificate %s given without its key", ErrTLSConfig, certFile)
	case keyFile != "" && certFile == "":
		return nil, fmt.Errorf("%w: key %s given without its certificate", ErrTLSConfig, keyFile)
	case caFile == "":
		return nil, fmt.Errorf("%w: no CA file to verify the nodes' certificates with", ErrTLSConfig)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read ca: %v", ErrTLSConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: ca %s holds no PEM certificate", ErrTLSConfig, caFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: load cert %s and key %s: %v", ErrTLSConfig, certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
