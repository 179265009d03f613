package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/transport"
)

func TestWritesCAPeersAndClientWithTheRightSANs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errb bytes.Buffer
	if code := run([]string{"--dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, name := range []string{"ca", "n1", "n2", "n3", "client"} {
		for _, ext := range []string{".crt", ".key"} {
			if !strings.Contains(out.String(), "wrote "+filepath.Join(dir, name+ext)) {
				t.Errorf("output does not list %s%s:\n%s", name, ext, out.String())
			}
		}
		info, err := os.Stat(filepath.Join(dir, name+".key"))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v %v", name, info, err)
		}
	}
	load := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(dir, name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(load("ca"))
	for _, id := range []string{"n1", "n2", "n3"} {
		c := load(id)
		if !transport.HasPeerIdentity(c, transport.DefaultPeerIdentity) {
			t.Errorf("%s lacks the peer identity", id)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s as a server on 127.0.0.1: %v", id, err)
		}
		if err := c.VerifyHostname("localhost"); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	cl := load("client")
	if transport.HasPeerIdentity(cl, transport.DefaultPeerIdentity) {
		t.Error("client certificate carries the peer identity")
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
}
