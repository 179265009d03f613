package cluster

import (
	"strings"
	"testing"
	"time"
)

// Validate holds the cross-field rules for embedding applications too:
// the skew margin must cover drift x max ttl (DESIGN.md, Time).
func TestValidateRefusesAMarginShortOfTheDriftOfAMaxTTLLease(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.DataDir, c.Bootstrap = "n1", "/tmp/x", map[string]string{"n1": "127.0.0.1:7001"}
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
