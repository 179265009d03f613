package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasefence/leasefence/internal/testcluster"
)

// Tests in this file run leasectl against real leased processes on
// loopback (real Raft on disk, real gRPC), built once per test binary.

var leased struct {
	once    sync.Once
	bin     string
	cleanup func()
	err     error
}

// leasedBinary builds leased on first use. It is built without the race
// detector: these tests are about leasectl, and the nodes must keep time
// on shared cores.
func leasedBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real leased processes")
	}
	leased.once.Do(func() { leased.bin, leased.cleanup, leased.err = testcluster.BuildForBenchmarks() })
	if leased.err != nil {
		t.Fatal(leased.err)
	}
	return leased.bin
}

func cleanupLeased() {
	if leased.cleanup != nil {
		leased.cleanup()
	}
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leasectlOn runs leasectl as a user would (the default retry budget) with
// args, against endpoints.
func leasectlOn(endpoints []string, args ...string) result {
	var stdout, stderr syncBuffer
	a := newTestApp(&stdout, &stderr)
	a.retryFor = 0 // the client's default, as in the binary
	code := a.run(context.Background(), append(args, "--endpoints", strings.Join(endpoints, ",")))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Two of three nodes frozen (SIGSTOP: their ports accept connections and
// never answer): the survivor answers that it knows no leader. That is no
// quorum, not an unreachable cluster.
func TestFrozenMajorityIsReportedAsNoLeaderNotUnreachable(t *testing.T) {
	c := testcluster.Start(t, leasedBinary(t), 3)
	leader := c.Leader()
	survivor, other := (leader+1)%3, (leader+2)%3
	for _, i := range []int{leader, other} {
		c.Signal(i, syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, i := range []int{leader, other} {
			c.Signal(i, syscall.SIGCONT)
		}
	})
	eventually(t, 15*time.Second, "the survivor knows no leader", func() bool {
		st, err := c.Status(survivor)
		return err == nil && st.GetLeaderId() == "" && st.GetState() != "leader"
	})
	eps := c.Endpoints()
	orders := []struct {
		name      string
		endpoints []string
		timeout   string
	}{
		{"survivor first", []string{eps[survivor], eps[leader], eps[other]}, "5s"},
		// Each frozen node costs its 2s connection timeout before the
		// survivor is asked.
		{"frozen first", []string{eps[leader], eps[other], eps[survivor]}, "10s"},
	}
	for _, o := range orders {
		for _, cmd := range [][]string{{"acquire", "frozen/1", "--ttl", "5s"}, {"get", "frozen/1"}} {
			res := leasectlOn(o.endpoints, append(cmd, "--timeout", o.timeout)...)
			line := firstLine(res.stderr)
			if res.code != ExitFailed || !strings.HasPrefix(line, "leasectl: no leader/quorum") || strings.Contains(res.stderr, "unreachable") {
				t.Errorf("%s: %s: exit %d, stderr:\n%s\nwant exit %d and \"leasectl: no leader/quorum...\"", o.name, cmd[0], res.code, res.stderr, ExitFailed)
			}
		}
	}
}

// acquire --wait --timeout on a held resource ends with exit 1 and says
// who holds it.
func TestAcquireWaitTimeoutSaysTimedOutWaitingAndWhoHoldsIt(t *testing.T) {
	c := testcluster.Start(t, leasedBinary(t), 3)
	eps := c.Endpoints()
	res := leasectlOn(eps, "acquire", "jobs/held", "--ttl", "30s", "--holder", "A", "--json")
	var held struct {
		Lease struct{ Token uint64 } `json:"lease"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &held); res.code != ExitOK || err != nil {
		t.Fatalf("first acquire: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	start := time.Now()
	res = leasectlOn(eps, "acquire", "jobs/held", "--ttl", "5s", "--holder", "B", "--wait", "--timeout", "1s")
	took := time.Since(start)
	// The "waiting for" line comes from a read bounded by a second: on a
	// slow machine it may be missing (TestAcquireWaitSaysItIsWaiting pins it).
	want := regexp.MustCompile(fmt.Sprintf(`^(?:leasectl: waiting for jobs/held: held by A \(token %[1]d\), time left [0-9.]+s, 0 waiting ahead; Ctrl-C to stop\n)?`+
		`leasectl: timed out waiting for jobs/held after 1s; held by A \(token %[1]d\), time left [0-9.]+s\n$`, held.Lease.Token))
	if res.code != ExitRefused || !want.MatchString(res.stderr) || res.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and stderr matching %s", res.code, res.stdout, res.stderr, ExitRefused, want)
	}
	if took > 5*time.Second {
		t.Errorf("took %v to time out after 1s", took)
	}
}

func TestTransferLeadershipNamesTheNewLeaderOnARealCluster(t *testing.T) {
	c := testcluster.Start(t, leasedBinary(t), 3)
	old := c.Procs[c.Leader()]
	res := leasectlOn(c.Endpoints(), "transfer-leadership")
	m := regexp.MustCompile(`^leader now (n[0-9]) \((127\.0\.0\.1:[0-9]+)\)\n$`).FindStringSubmatch(res.stdout)
	if res.code != ExitOK || m == nil || m[1] == old.ID {
		t.Fatalf("exit %d, stdout %q, stderr %q; want a leader other than %s", res.code, res.stdout, res.stderr, old.ID)
	}
	for _, p := range c.Procs {
		if p.ID == m[1] && p.Addr != m[2] {
			t.Errorf("printed %s at %s, it listens on %s", m[1], m[2], p.Addr)
		}
	}
}
