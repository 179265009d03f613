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

// validConfig is a Config Validate accepts: defaults, an id, a data dir,
// a one-node bootstrap list and explicit plaintext.
func validConfig() Config {
	c := DefaultConfig()
	c.ID, c.DataDir, c.Bootstrap = "n1", "/tmp/x", map[string]string{"n1": "127.0.0.1:7001"}
	c.Insecure = true
	return c
}

// Every rule Validate keeps refuses on its own, naming what is wrong, and
// a valid Config passes: one row per refusal.
func TestValidateRefusesEachBrokenRule(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("the valid config: %v", err)
	}
	if err := validConfig().withDefaults().Validate(); err != nil {
		t.Fatalf("the valid config with defaults: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"no id", func(c *Config) { c.ID = "" }, "id is required"},
		{"bad id", func(c *Config) { c.ID = "n 1" }, `id "n 1"`},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "data dir is required"},
		{"neither TLS nor insecure", func(c *Config) { c.Insecure = false }, "no TLS configured"},
		{"TLS and insecure", func(c *Config) { c.TLS.CAFile = "ca.crt" }, "exclude each other"},
		{"TLS files incomplete", func(c *Config) { c.Insecure, c.TLS.CertFile = false, "n1.crt" }, "without its key"},
		{"bad peer identity", func(c *Config) { c.PeerIdentity = "not a uri" }, "peer identity"},
		{"no listen address", func(c *Config) { c.Listen = "" }, "listen address is required"},
		{"bootstrap without this node", func(c *Config) { c.Bootstrap = map[string]string{"n2": "127.0.0.1:7002"} }, "must include this node's id"},
		{"bootstrap entry incomplete", func(c *Config) { c.Bootstrap["n2"] = "" }, "is incomplete"},
		{"bootstrap bad id", func(c *Config) { c.Bootstrap["n 2"] = "127.0.0.1:7002" }, "bootstrap id"},
		{"bootstrap bad address", func(c *Config) { c.Bootstrap["n2"] = "nowhere" }, "bootstrap address"},
		{"bootstrap address twice", func(c *Config) { c.Bootstrap["n2"] = "127.0.0.1:7001" }, "given to both"},
		{"restore without bootstrap", func(c *Config) { c.Bootstrap, c.RestoreFrom, c.RestoreEpoch = nil, "backup.bin", 1 }, "bootstrap list"},
		{"restore epoch in milliseconds", func(c *Config) { c.RestoreFrom, c.RestoreEpoch = "backup.bin", 1_764_800_000_000 }, "milliseconds given"},
		{"restore epoch before the epochs", func(c *Config) { c.RestoreFrom, c.RestoreEpoch = "backup.bin", 1 }, "milliseconds given"},
		{"negative skew margin", func(c *Config) { c.SkewMargin = -time.Second }, "must not be negative"},
		{"min ttl within 2 x skew margin", func(c *Config) { c.MinTTL = time.Second }, "must exceed 2 x skew margin"},
		{"max ttl below min ttl", func(c *Config) { c.MaxTTL = c.MinTTL - time.Millisecond }, "below min ttl"},
		{"skew margin short of the drift", func(c *Config) { c.MaxTTL = 3 * time.Hour }, "does not cover the drift"},
		{"drift out of range", func(c *Config) { c.Drift = 0.2 }, "drift 0.2 must lie in"},
		{"trailing logs below the snapshot threshold", func(c *Config) { c.TrailingLogs = c.SnapshotThreshold - 1 }, "trailing logs"},
		{"snapshot threshold max below the threshold", func(c *Config) { c.SnapshotThresholdMax = c.SnapshotThreshold - 1 }, "snapshot threshold max"},
		{"tick not positive", func(c *Config) { c.Tick = 0 }, "tick 0s must be positive"},
		{"max batch zero", func(c *Config) { c.MaxBatch = 0 }, "max batch"},
		{"leader lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, "leader lease timeout"},
		{"election below heartbeat", func(c *Config) { c.ElectionTimeout = 100 * time.Millisecond }, "election timeout"},
		{"raft: heartbeat too low", func(c *Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Millisecond, time.Millisecond, time.Millisecond
		}, "HeartbeatTimeout is too low"},
		{"raft: commit timeout too low", func(c *Config) { c.CommitTimeout = time.Microsecond }, "CommitTimeout is too low"},
		{"raft: snapshot interval too low", func(c *Config) { c.SnapshotInterval = time.Millisecond }, "SnapshotInterval is too low"},
		{"pprof without metrics", func(c *Config) { c.Pprof = true }, "pprof needs a metrics listen address"},
		{"bad peer route", func(c *Config) { c.Unsafe.PeerRoutes = map[string]string{"a": "127.0.0.1:1"} }, "peer route"},
		{"small watch buffer", func(c *Config) { c.WatchBuffer = 8 }, "watch buffer 8"},
		{"no waiters", func(c *Config) { c.MaxWaitersPerResource = 0 }, "max waiters per resource"},
		{"short refusal keep", func(c *Config) { c.RefusalKeep = time.Second }, "refusal keep"},
		{"no refusals", func(c *Config) { c.MaxRefusals = 0 }, "max refusals"},
		{"policy and policy file", func(c *Config) { c.Policy, c.PolicyFile = &Policy{}, "policy.json" }, "not both"},
		{"fault clock file and a Clock", func(c *Config) { c.Unsafe.FaultClockFile, c.Clock = "clock.json", SystemClock() }, "a fault clock file and a Clock exclude each other"},
		{"bad limits", func(c *Config) { c.Limits.MaxConnections = -1 }, "max connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// A fault clock file alone is valid after defaults: withDefaults leaves
// the clock to Start, which makes it the fault clock.
func TestFaultClockFileAloneIsValid(t *testing.T) {
	c := validConfig()
	c.Unsafe.FaultClockFile = "clock.json"
	if err := c.withDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
}
