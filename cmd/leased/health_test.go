package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/buildinfo"
	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/internal/loopback"
	"github.com/leasefence/leasefence/internal/testcluster"
	"github.com/leasefence/leasefence/transport"
)

func TestReflectionAndStatusPageAreOnWithInsecureOffWithTLSUnlessGiven(t *testing.T) {
	t.Setenv("LEASEFENCE_INSECURE", "")
	os.Unsetenv("LEASEFENCE_INSECURE")
	base := []string{"--id", "n1", "--data-dir", t.TempDir(), "--bootstrap", "n1=127.0.0.1:7001", "--insecure"}
	for _, c := range []struct {
		extra []string
		want  bool
	}{
		{nil, true},
		{[]string{"--grpc-reflection=false"}, false},
		{[]string{"--grpc-reflection"}, true},
		{[]string{"--grpc-reflection=auto"}, true},
	} {
		cfg, err := parse(append(append([]string{}, base...), c.extra...), io.Discard, io.Discard)
		if err != nil || cfg.GRPCReflection != c.want {
			t.Errorf("%v: reflection %v, err %v; want %v", c.extra, cfg.GRPCReflection, err, c.want)
		}
	}
	if _, err := parse(append(base, "--grpc-reflection=maybe"), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "true, false or auto") {
		t.Errorf("--grpc-reflection=maybe: %v", err)
	}
	// With TLS both are off unless asked for; the status page follows the
	// same rule as reflection.
	tlsArgs := []string{"--id", "n1", "--data-dir", t.TempDir(), "--bootstrap", "n1=127.0.0.1:7001",
		"--tls-cert", "n1.crt", "--tls-key", "n1.key", "--tls-ca", "ca.crt"}
	cfg, err := parse(tlsArgs, io.Discard, io.Discard)
	if err != nil || cfg.GRPCReflection || cfg.StatusPage {
		t.Errorf("TLS: reflection %v, status page %v, err %v; want both off", cfg.GRPCReflection, cfg.StatusPage, err)
	}
	cfg, err = parse(append(tlsArgs, "--grpc-reflection", "--status-page"), io.Discard, io.Discard)
	if err != nil || !cfg.GRPCReflection || !cfg.StatusPage {
		t.Errorf("TLS with both flags: reflection %v, status page %v, err %v", cfg.GRPCReflection, cfg.StatusPage, err)
	}
	cfg, err = parse(base, io.Discard, io.Discard)
	if err != nil || !cfg.StatusPage {
		t.Errorf("--insecure: status page %v, err %v; want on", cfg.StatusPage, err)
	}
}

// leased health against a real single-node cluster: SERVING (exit 0) once it
// leads, exit 1 where nothing answers, exit 2 on bad usage.
func TestHealthSubcommandChecksARealNode(t *testing.T) {
	addr := testcluster.Nodes(t, 1)[0].Addr()
	waitServing(t, addr)
	// Nothing listens on a port just closed.
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l2.Addr().String()
	l2.Close()
	if code := run([]string{"health", "--addr", dead, "--timeout", "500ms"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("health of a dead port: exit %d, want 1", code)
	}
	if code := run([]string{"health", "--addr", addr, "--tls-cert", "x.crt"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("health with half the TLS flags: exit %d, want 2", code)
	}
}

// leased health against a node with mutual TLS, as the probe in the node's
// own container runs it: with the node's certificate and CA it is SERVING;
// with a certificate of another CA, or without one, it fails (exit 1).
func TestHealthSubcommandSpeaksMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _, err := ca.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Peer("n1", transport.DefaultPeerIdentity)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.Write(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := addrs[0]
	cfg := cluster.DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, t.TempDir()
	cfg.TLS = transport.TLSFiles{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}
	cfg.Bootstrap = map[string]string{"n1": addr}
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	waitServing(t, addr, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-ca", caFile, "--server-name", "localhost")

	other, err := certgen.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Client("stranger")
	if err != nil {
		t.Fatal(err)
	}
	sCert, sKey, err := stranger.Write(dir, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	if code := run([]string{"health", "--addr", addr, "--timeout", "2s", "--tls-cert", sCert, "--tls-key", sKey, "--tls-ca", caFile, "--server-name", "localhost"}, io.Discard, &errb); code != 1 {
		t.Fatalf("health with another CA's certificate: exit %d, want 1 (%s)", code, errb.String())
	}
	if code := run([]string{"health", "--addr", addr, "--timeout", "2s"}, io.Discard, io.Discard); code != 1 {
		t.Fatalf("health without TLS against a TLS node: exit %d, want 1", code)
	}
}

// waitServing runs leased health against addr, with extra flags, until it
// answers SERVING (exit 0), for up to 20 s.
func waitServing(t *testing.T, addr string, extra ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	deadline := time.Now().Add(20 * time.Second)
	for {
		out.Reset()
		errb.Reset()
		if code := run(append([]string{"health", "--addr", addr}, extra...), &out, &errb); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leased health never succeeded: %s%s", out.String(), errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := addr + ": SERVING\n"; out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
}

func TestVersionFlagPrintsTheBuildAndExits(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("leased --version: exit %d, stderr %q", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "version ") || !strings.HasPrefix(lines[1], "commit  ") || lines[2] != "go      "+runtime.Version() {
		t.Fatalf("leased --version printed %q", out.String())
	}
	if out.String() != buildinfo.Read().Text() {
		t.Fatalf("leased --version %q is not buildinfo's %q", out.String(), buildinfo.Read().Text())
	}
	// A build from a checkout says the same version as the node's Status.
	if v := buildinfo.From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true).Version; v != cluster.Version {
		t.Fatalf("a checkout build says version %q, its nodes' Status %q", v, cluster.Version)
	}
	out.Reset()
	if code := run([]string{"--print-config"}, &out, io.Discard); code != 0 || strings.Contains(out.String(), "version") {
		t.Fatalf("--print-config lists version: %q", out.String())
	}
}
