// Package scripts holds the tests of the shell scripts beside it, run
// against freshly built binaries and real processes.
package scripts

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinaries builds leased and leasectl into a temporary bin dir.
func buildBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", bin+"/", "../cmd/leased", "../cmd/leasectl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freeBase returns a port p with p..p+5 free right now (three gRPC ports,
// then three metrics ports).
func freeBase(t *testing.T) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base > 65000 {
			continue
		}
		ok := true
		for i := 1; i < 6; i++ {
			l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			l2.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no six consecutive free ports")
	return 0
}

// lockedBuffer is an output buffer the script and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type script struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

func startScript(t *testing.T, bin, data string, base int, args ...string) *script {
	t.Helper()
	cmd := exec.Command("./run-cluster.sh", args...)
	cmd.Env = append(os.Environ(), "BIN="+bin, "DATA="+data, fmt.Sprintf("PORT_BASE=%d", base), fmt.Sprintf("METRICS_BASE=%d", base+3), "START_TIMEOUT=30")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &script{cmd: cmd, out: out}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return s
}

func waitFor(t *testing.T, s *script, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(s.out.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the script's output:\n%s", what, s.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRunClusterStartsRestartsAndAppendsLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three nodes")
	}
	bin, data, base := buildBinaries(t), t.TempDir(), freeBase(t)
	s := startScript(t, bin, data, base)
	waitFor(t, s, "cluster is up")
	waitFor(t, s, "scripts/run-cluster.sh restart n2")
	// The status page it prints answers.
	pageURL := fmt.Sprintf("http://127.0.0.1:%d/", base+3)
	if !strings.Contains(s.out.String(), pageURL) {
		t.Errorf("no status page URL %s in:\n%s", pageURL, s.out.String())
	}
	resp, err := http.Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `<span id="node">n1</span>`) {
		t.Errorf("status page: %d\n%s", resp.StatusCode, page)
	}
	pid, err := os.ReadFile(filepath.Join(data, "n2.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(string(pid), &p)
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for syscall.Kill(p, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	restart := exec.Command("./run-cluster.sh", "restart", "n2")
	restart.Env = append(os.Environ(), "BIN="+bin, "DATA="+data, fmt.Sprintf("PORT_BASE=%d", base), fmt.Sprintf("METRICS_BASE=%d", base+3))
	if out, err := restart.CombinedOutput(); err != nil || !strings.Contains(string(out), "restarted n2") {
		t.Fatalf("restart n2: %v\n%s", err, out)
	}
	log, err := os.ReadFile(filepath.Join(data, "n2.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "run-cluster.sh starts n2"); n != 2 {
		t.Fatalf("n2.log holds %d starts, want 2 (appended, not truncated)", n)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	if out := s.out.String(); !strings.Contains(out, "stopped; data kept") {
		t.Fatalf("stop:\n%s", out)
	}
	// The restarted node, not a child of the script, was stopped too.
	newPid, _ := os.ReadFile(filepath.Join(data, "n2.pid"))
	if len(newPid) > 0 {
		t.Fatalf("n2.pid left behind: %s", newPid)
	}
}

// A node that cannot start (its data dir locked by another leased) makes
// the script say so, with the reason from the node's log, stop the others
// and exit 1, without ever claiming the cluster is up.
func TestRunClusterReportsANodeThatFailedToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nodes")
	}
	bin, data, base := buildBinaries(t), t.TempDir(), freeBase(t)
	// Another leased holds n2's data dir (a single-node cluster of its own
	// on a port of its own).
	other := freeBase(t)
	intruder := exec.Command(filepath.Join(bin, "leased"), "--insecure", "--id", "n2",
		"--listen", fmt.Sprintf("127.0.0.1:%d", other), "--data-dir", filepath.Join(data, "n2"),
		"--bootstrap", fmt.Sprintf("n2=127.0.0.1:%d", other))
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = intruder.Process.Kill(); _ = intruder.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(data, "n2", "raft.db")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the intruding leased never opened its data dir")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := startScript(t, bin, data, base)
	err := s.cmd.Wait()
	out := s.out.String()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("script ended with %v, want exit 1:\n%s", err, out)
	}
	for _, want := range []string{"n2 failed to start", "is locked by another process, pid " + fmt.Sprint(intruder.Process.Pid), "the cluster is NOT up"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cluster is up") {
		t.Errorf("the script claimed the cluster is up:\n%s", out)
	}
}
