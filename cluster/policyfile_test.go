package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testPolicyJSON = `{"identities": {"alice": {"tokens": ["alice-token-0123456789abcdef0123456789"], "resources": ["a/"]},
 "ops": {"admin": true, "tokens": ["ops-token-0123456789abcdef0123456789ab"]}}}`

// A policy file others may write is refused (anyone who can write it can
// grant themselves everything); one others may read (it holds tokens)
// loads with a warning; and the start says a policy is in force and which
// identities it loaded.
func TestPolicyFilePermissionsAreCheckedAndThePolicyIsLogged(t *testing.T) {
	for _, tc := range []struct {
		mode    os.FileMode
		refused bool
		warn    bool
	}{
		{0o600, false, false},
		{0o644, false, true},
		{0o666, true, false}, // every mode: authz TestLoadFileChecksPermissions
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "policy.json")
			if err := os.WriteFile(file, []byte(testPolicyJSON), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil {
				t.Fatal(err)
			}
			addr := freeAddrs(t, 1)[0]
			cfg := DefaultConfig()
			cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
			cfg.Insecure = true
			cfg.Bootstrap = map[string]string{"n1": addr}
			cfg.PolicyFile = file
			var buf lockedBuffer
			cfg.Logger = newBufLogger(&buf)
			n, err := Start(cfg)
			if tc.refused {
				if err == nil {
					n.Close()
					t.Fatalf("a policy file of mode %v was loaded", tc.mode)
				}
				if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "writable") {
					t.Fatalf("refusal %q does not name the file and the problem", err)
				}
				if _, err := os.Stat(filepath.Join(cfg.DataDir, "raft.db")); err == nil {
					t.Fatal("the refused start created raft.db")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n.Close()
			out := buf.String()
			if !strings.Contains(out, "authorization policy in force") || !strings.Contains(out, "alice") || !strings.Contains(out, "ops") {
				t.Errorf("no log line names the policy and its identities:\n%s", out)
			}
			if got := strings.Contains(out, "readable by every user"); got != tc.warn {
				t.Errorf("world-readable warning %v, want %v:\n%s", got, tc.warn, out)
			}
			if strings.Contains(out, "0123456789abcdef") {
				t.Errorf("a token reached the log:\n%s", out)
			}
		})
	}
}
