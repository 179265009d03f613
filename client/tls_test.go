package client

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/internal/certgen"
)

func TestLoadTLSBuildsAVerifyingConfigAndRefusesHalfConfiguration(t *testing.T) {
	dir := t.TempDir()
	if _, err := certgen.WriteCluster(dir, nil, []string{"client"}, ""); err != nil {
		t.Fatal(err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	cfg, err := LoadTLS(f("client.crt"), f("client.key"), f("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.InsecureSkipVerify {
		t.Fatalf("config %+v", cfg)
	}
	if cfg, err := LoadTLS("", "", f("ca.crt")); err != nil || len(cfg.Certificates) != 0 {
		t.Fatalf("CA only (server-authenticated TLS): %v", err)
	}
	cases := []struct {
		cert, key, ca, want string
	}{
		{f("client.crt"), "", f("ca.crt"), "without its key"},
		{"", f("client.key"), f("ca.crt"), "without its certificate"},
		{f("client.crt"), f("client.key"), "", "no CA file"},
		{f("client.crt"), f("client.key"), f("nope.crt"), "read ca"},
		{f("client.crt"), f("ca.key"), f("ca.crt"), "private key does not match"},
	}
	for _, c := range cases {
		_, err := LoadTLS(c.cert, c.key, c.ca)
		if !errors.Is(err, ErrTLSConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadTLS(%q, %q, %q): %v, want %q", c.cert, c.key, c.ca, err, c.want)
		}
	}
}
