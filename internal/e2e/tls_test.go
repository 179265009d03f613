package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/internal/ctl"
	"github.com/leasefence/leasefence/internal/testcluster"
	"github.com/leasefence/leasefence/transport"
)

// mutualTLS writes into a fresh dir a CA (ca.crt), the certificate every
// node presents (node.crt, node.key) and a client's (client.crt,
// client.key). It returns the dir, the client's TLS config and leased's
// flags for mutual TLS.
func mutualTLS(t *testing.T) (dir string, clientTLS *tls.Config, nodeFlags []string) {
	t.Helper()
	dir = t.TempDir()
	if _, err := certgen.WriteCluster(dir, []string{"node"}, []string{"client"}, transport.DefaultPeerIdentity); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	clientTLS, err := client.LoadTLS(file("client.crt"), file("client.key"), file("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, clientTLS, []string{"--tls-cert", file("node.crt"), "--tls-key", file("node.key"), "--tls-ca", file("ca.crt")}
}

// A cluster of real leased processes started with --tls-cert/--tls-key/
// --tls-ca serves leasectl and the Go client when they present a client
// certificate, and refuses them when they come without TLS.
func TestLeasectlAndClientOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir, clientTLS, nodeFlags := mutualTLS(t)
	file := func(name string) string { return filepath.Join(dir, name) }
	c := testcluster.StartTLS(t, leasedBin, 3, clientTLS, nodeFlags...)
	eps := c.Endpoints()
	tlsFlags := []string{"--tls-cert", file("client.crt"), "--tls-key", file("client.key"), "--tls-ca", file("ca.crt")}

	code, out := leasectl(t, eps, append([]string{"acquire", "tls/ctl", "--ttl", "10s"}, tlsFlags...)...)
	if code != ctl.ExitOK || !strings.Contains(out, "token") {
		t.Fatalf("leasectl acquire with --tls-*: exit %d\n%s", code, out)
	}
	if code, out := leasectl(t, eps, append([]string{"status"}, tlsFlags...)...); code != ctl.ExitOK {
		t.Fatalf("leasectl status with --tls-*: exit %d\n%s", code, out)
	}
	if code, out := leasectl(t, eps, "status", "--timeout", "2s"); code == ctl.ExitOK {
		t.Fatalf("leasectl status in plaintext against a TLS cluster succeeded:\n%s", out)
	}
	if code, out := leasectl(t, eps, "status", "--tls-cert", file("client.crt"), "--tls-key", file("client.key")); code == ctl.ExitOK ||
		!strings.Contains(out, "--tls-ca") {
		t.Fatalf("leasectl with a client cert but no CA: exit %d\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(client.Config{Endpoints: eps, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lease, err := cl.Acquire(ctx, "tls/client", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Go client over mutual TLS: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	plain, err := client.New(client.Config{Endpoints: eps, RetryFor: time.Second, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Acquire(ctx, "tls/plain", client.WithTTL(5*time.Second)); err == nil {
		t.Fatal("plaintext Go client was served by a TLS cluster")
	}
}

// leased refuses to start, with a message naming the missing piece, when
// TLS is half configured.
func TestLeasedRefusesHalfConfiguredTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the leased binary")
	}
	dir := t.TempDir()
	cases := map[string]struct {
		args []string
		want string
	}{
		"cert without key": {[]string{"--tls-cert", filepath.Join(dir, "n1.crt"), "--tls-ca", filepath.Join(dir, "ca.crt")}, "without its key"},
		"cert without ca":  {[]string{"--tls-cert", filepath.Join(dir, "n1.crt"), "--tls-key", filepath.Join(dir, "n1.key")}, "without a CA"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--id", "n1", "--data-dir", filepath.Join(t.TempDir(), "n1"), "--bootstrap", "n1=127.0.0.1:1"}, tc.args...)
			var stderr bytes.Buffer
			cmd := exec.Command(leasedBin, args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("leased %v: %v, stderr %q; want exit 2 mentioning %q", tc.args, err, stderr.String(), tc.want)
			}
		})
	}
}
