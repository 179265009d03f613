package authz

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasefence/leasefence/authz/authztest"
)

// mustPolicy parses src or fails the test.
func mustPolicy(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

func cert(cn string, uris ...string) *x509.Certificate {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		leaf.URIs = append(leaf.URIs, pu)
	}
	return leaf
}

func TestParsePolicyRefusesBadPolicies(t *testing.T) {
	for name, src := range map[string]string{
		"unknown field":  `{"identities": {"a": {"resourcez": ["x"]}}}`,
		"short token":    `{"identities": {"a": {"tokens": ["short"]}}}`,
		"shared token":   `{"identities": {"a": {"tokens": ["0123456789abcdef"]}, "b": {"tokens": ["0123456789abcdef"]}}}`,
		"separator":      `{"identities": {"a|b": {}}}`,
		"empty identity": `{"identities": {"": {}}}`,
		"null grant":     `{"identities": {"a": null}}`,
		"bad peer name":  `{"identities": {}, "peers": ["n|1"]}`,
		"not json":       `identities: a`,
	} {
		if _, err := Parse([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	mustPolicy(t, authztest.Policy)
}

// Compile checks a policy built in Go and leaves the caller's value alone.
func TestCompileChecksACopy(t *testing.T) {
	in := &Policy{Identities: map[string]*Grant{"a": {Tokens: []string{"0123456789abcdef"}}}}
	p, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	if in.tokens != nil || p.tokens == nil {
		t.Fatal("Compile changed its argument or did not compile the copy")
	}
	if _, err := Compile(&Policy{Identities: map[string]*Grant{"a": {Tokens: []string{"short"}}}}); err == nil {
		t.Fatal("a short token was accepted")
	}
}

func TestIdentifyNamesTheCaller(t *testing.T) {
	p := mustPolicy(t, authztest.Policy)
	for _, tt := range []struct {
		name string
		cr   Credentials
		want string // identity, or "" for a refusal
		all  bool
	}{
		{"a bearer token", Credentials{Authorization: "Bearer " + authztest.AliceToken, HasAuthorization: true}, "alice", false},
		{"the scheme is case-insensitive", Credentials{Authorization: "bearer " + authztest.BobToken, HasAuthorization: true}, "bob", false},
		{"an unknown token", Credentials{Authorization: "Bearer nope-0123456789abcdef", HasAuthorization: true}, "", false},
		{"an empty authorization", Credentials{HasAuthorization: true, Cert: cert("alice")}, "", false},
		{"another scheme", Credentials{Authorization: "Basic " + authztest.AliceToken, HasAuthorization: true}, "", false},
		{"a token wins over the certificate", Credentials{Authorization: "Bearer " + authztest.BobToken, HasAuthorization: true, Cert: cert("alice")}, "bob", false},
		{"no credentials", Credentials{}, "", false},
		{"URI SAN names the identity", Credentials{Cert: cert("ignored", "spiffe://example.org/carol")}, "spiffe://example.org/carol", false},
		{"CN when there is no URI SAN", Credentials{Cert: cert("alice")}, "alice", false},
		{"unknown certificate", Credentials{Cert: cert("mallory")}, "", false},
		{"a peer named in the policy", Credentials{Cert: cert("node-cert")}, "node-cert", true},
		{"a peer by its peer identity", Credentials{Cert: cert("n9"), CertIsPeer: true}, "n9", true},
		{"a peer forwards its caller's identity", Credentials{Cert: cert("node-cert"), Forwarded: true, ForwardedIdentity: "alice", HasForwardedIdentity: true}, "alice", false},
		{"a peer forwarding an unknown identity", Credentials{Cert: cert("node-cert"), Forwarded: true, ForwardedIdentity: "mallory", HasForwardedIdentity: true}, "", false},
		{"a peer forwarding an empty identity", Credentials{Cert: cert("node-cert"), Forwarded: true, HasForwardedIdentity: true}, "", false},
		{"an identity on a call not forwarded is ignored", Credentials{Cert: cert("node-cert"), ForwardedIdentity: "alice", HasForwardedIdentity: true}, "node-cert", true},
		{"a non-peer cannot claim an identity", Credentials{Cert: cert("alice"), Forwarded: true, ForwardedIdentity: "root", HasForwardedIdentity: true}, "alice", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := p.Identify(tt.cr)
			if tt.want == "" {
				if !errors.Is(err, ErrPermissionDenied) {
					t.Fatalf("got %+v, %v; want a refusal", c, err)
				}
				return
			}
			if err != nil || c.Name != tt.want || c.All() != tt.all {
				t.Fatalf("got %+v, %v; want %s (all %v)", c, err, tt.want, tt.all)
			}
		})
	}
}

func TestAllowKeepsCallersWithinTheirGrants(t *testing.T) {
	p := mustPolicy(t, authztest.Policy)
	alice := &Caller{Name: "alice", Grant: p.Identities["alice"]}
	root := &Caller{Name: "root", Grant: p.Identities["root"]}
	carol := &Caller{Name: "spiffe://example.org/carol", Grant: p.Identities["spiffe://example.org/carol"]}
	for _, tt := range []struct {
		c        *Caller
		perm     Perm
		resource string
		ok       bool
	}{
		{alice, Resource, "a/1", true},
		{alice, Resource, "b/1", false},
		{alice, Watch, "a/", true},
		{alice, Watch, "", false},
		{alice, Admin, "", false},
		{alice, Any, "", true},
		{root, Admin, "", true},
		{root, Watch, "", true},
		{carol, Resource, "c/x", true},
		{carol, Watch, "c/x", false},
		{&Caller{Name: "node-cert"}, Admin, "", true},
		{&Caller{}, Resource, "anything", true},
	} {
		err := Allow(tt.c, tt.perm, tt.resource)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrPermissionDenied)) {
			t.Errorf("%s %s %q: %v, want allowed=%v", tt.c.Name, tt.perm, tt.resource, err, tt.ok)
		}
	}
	if err := Allow(carol, Resource, "a/x"); err == nil || !strings.Contains(err.Error(), "outside its prefixes") {
		t.Errorf("carol on a/x: %v", err)
	}
}

func TestHolderLabelsCountPerIdentity(t *testing.T) {
	alice := &Caller{Name: "alice", Grant: &Grant{}}
	for _, tt := range []struct {
		c           *Caller
		label, want string
	}{
		{nil, "job", "job"},
		{&Caller{Name: "node"}, "job", "job"},
		{alice, "", "alice"},
		{alice, "alice", "alice"},
		{alice, "job", "alice|job"},
	} {
		got := HolderFor(tt.c, tt.label)
		if got != tt.want {
			t.Errorf("HolderFor(%v, %q) = %q, want %q", tt.c, tt.label, got, tt.want)
		}
		if tt.c != nil && !tt.c.All() && !HoldsFor(got, tt.c.Name) {
			t.Errorf("HoldsFor(%q, %q) is false", got, tt.c.Name)
		}
	}
	if HoldsFor("alicex|job", "alice") || HoldsFor("bob", "alice") {
		t.Error("HoldsFor matched another identity")
	}
}

// A policy file others may write is refused; one every user may read loads
// and says so (it holds bearer tokens).
func TestLoadFileChecksPermissions(t *testing.T) {
	for _, tc := range []struct {
		mode          os.FileMode
		refused, read bool
	}{
		{0o600, false, false},
		{0o640, false, false},
		{0o644, false, true},
		{0o620, true, false},
		{0o602, true, false},
		{0o666, true, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "policy.json")
			if err := os.WriteFile(file, []byte(authztest.Policy), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil {
				t.Fatal(err)
			}
			p, worldReadable, err := LoadFile(file)
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "writable") {
					t.Fatalf("mode %v: %v, want a refusal naming the file and the problem", tc.mode, err)
				}
				return
			}
			if err != nil || p == nil || worldReadable != tc.read {
				t.Fatalf("mode %v: %v, %v; want world-readable %v", tc.mode, p, err, tc.read)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("a missing file: %v", err)
	}
}
