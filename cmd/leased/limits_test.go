package main

import (
	"io"
	"testing"
	"time"

	"github.com/leasefence/leasefence/transport"
)

// The connection and message limits come from flags and the environment,
// default to transport.DefaultLimits, and out-of-range values stop the
// start with a message.
func TestLimitFlagsAndTheirChecks(t *testing.T) {
	t.Setenv("LEASEFENCE_INSECURE", "true")
	t.Setenv("LEASEFENCE_ID", "n1")
	t.Setenv("LEASEFENCE_DATA_DIR", t.TempDir())
	boot := []string{"--bootstrap", "n1=127.0.0.1:7001"}
	cfg, err := parse(boot, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits != transport.DefaultLimits() {
		t.Fatalf("default limits %+v, want %+v", cfg.Limits, transport.DefaultLimits())
	}
	t.Setenv("LEASEFENCE_MAX_CONNECTIONS", "100")
	cfg, err = parse(append(boot, "--handshake-timeout", "2s", "--idle-timeout", "1m", "--max-streams-per-connection", "64",
		"--max-client-message", "8192", "--max-peer-message", "4194304"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := transport.Limits{MaxConnections: 100, HandshakeTimeout: 2 * time.Second, IdleTimeout: time.Minute,
		MaxStreamsPerConnection: 64, MaxClientMessage: 8192, MaxPeerMessage: 4 << 20}
	if cfg.Limits != want {
		t.Fatalf("limits %+v, want %+v", cfg.Limits, want)
	}
	for name, args := range map[string][]string{
		"negative connections":           {"--max-connections", "-1"},
		"client message below a request": {"--max-client-message", "100"},
		"client above peer":              {"--max-client-message", "8388608", "--max-peer-message", "4194304"},
		"streams above uint32":           {"--max-streams-per-connection", "4294967296"},
		"too few streams":                {"--max-streams-per-connection", "2"},
		"negative handshake timeout":     {"--handshake-timeout", "-1s"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parse(append(boot, args...), io.Discard, io.Discard); err == nil {
				t.Fatalf("%v accepted", args)
			}
		})
	}
}
