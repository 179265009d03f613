package cluster

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/transport"
)

// Validate holds the cross-field rules for embedding applications too:
// the skew margin must cover drift x max ttl (DESIGN.md, Time).
func TestValidateRefusesAMarginShortOfTheDriftOfAMaxTTLLease(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.DataDir, c.Bootstrap = "n1", "/tmp/x", map[string]string{"n1": "127.0.0.1:7001"}
	c.Insecure = true
	c.MaxTTL = 3 * time.Hour // 1e-4 x 3h = 1.08s > 500ms
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "drift") {
		t.Fatalf("3h max ttl, 500ms margin: %v", err)
	}
	c.SkewMargin, c.MinTTL = 1080*time.Millisecond, 3*time.Second
	if err := c.Validate(); err != nil {
		t.Fatalf("margin equal to the drift: %v", err)
	}
	c.Drift = 2e-4
	if err := c.Validate(); err == nil {
		t.Fatal("doubled drift accepted")
	}
}

// An embedded node is held to leased's rule: TLS files or an explicit
// Insecure, never plaintext by default (issue 19), and never both.
func TestEmbeddedNodeWithoutTLSOrInsecureRefusesToStart(t *testing.T) {
	addr := freeAddrs(t, 1)[0]
	cfg := DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
	cfg.Bootstrap = map[string]string{"n1": addr}
	cfg.Logger = testLogger(t, "n1")
	n, err := Start(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node without TLS or Insecure started")
	}
	if !strings.Contains(err.Error(), "no TLS configured") || !strings.Contains(err.Error(), "insecure") {
		t.Fatalf("error %q: want one that names TLS and the insecure choice", err)
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
		t.Fatalf("refused start wrote %d entries into the data dir", len(entries))
	}

	cfg.Insecure, cfg.TLS = true, transport.TLSFiles{CertFile: "n1.crt", KeyFile: "n1.key", CAFile: "ca.crt"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("insecure with TLS files: %v", err)
	}

	cfg.TLS = transport.TLSFiles{}
	n, err = Start(cfg)
	if err != nil {
		t.Fatalf("explicitly insecure: %v", err)
	}
	n.Close()
}
