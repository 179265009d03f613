package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
	"github.com/leasefence/leasefence/transport"
)

// vmRSS reads the resident set size of process pid in bytes.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS line")
}

// honestLoad runs workers that acquire and release their own resources on
// conn until stop, or each has done max cycles, and returns every cycle's
// latency and the errors.
func honestLoad(conn *grpc.ClientConn, workers, max int, stop <-chan struct{}, tag string) (lat []time.Duration, errs int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	lc := api.NewLeaseServiceClient(conn)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < max; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := lc.Acquire(ctx, &api.AcquireRequest{
					Resource: fmt.Sprintf("honest/%s/%d", tag, w), Holder: "honest", Ttl: durationpb.New(10 * time.Second),
					RequestId: fmt.Sprintf("honest-%s-%d-%d", tag, w, i),
				})
				if err == nil {
					_, err = lc.Release(ctx, &api.ReleaseRequest{LeaseId: res.GetLease().GetId()})
				}
				cancel()
				d := time.Since(start)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, errs
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// An abusive client against a TLS cluster of real leased processes: twice
// --max-connections silent TCP connections and 32 concurrent 15 MiB
// requests (the numbers of issue 14 §4). The silent connections past the
// cap are closed at once, every big request is refused with
// ResourceExhausted, a new certified client is still served, the leader's
// RSS stays bounded, and honest clients' latency is reported before and
// during (asserted only loosely: the machine is shared).
//
// Built without the race detector so that RSS and latency mean something;
// LEASEFENCE_E2E_LEASED runs another leased binary (e.g. one built from
// before the limits, which takes no limit flags) for comparison.
func TestAbusiveClientIsRefusedWhileHonestClientsAreServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	bin := os.Getenv("LEASEFENCE_E2E_LEASED")
	if bin == "" {
		b, cleanup, err := testcluster.BuildForBenchmarks()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		bin = b
	}
	const capN = 200
	dir, clientTLS, args := mutualTLS(t)
	args = append(args, "--log-level", "warn")
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	withLimits := strings.Contains(string(help), "-max-connections")
	if withLimits {
		// The default handshake timeout: a certified client starved of CPU
		// on a busy machine must not lose its connection mid-handshake (it
		// did with 3 s in CI); the silent connections past cap and reserve
		// are closed at once anyway, by eviction.
		args = append(args, "--max-connections", strconv.Itoa(capN), "--handshake-timeout", transport.DefaultHandshakeTimeout.String())
	}
	abuserBin := buildAbuser(t)
	c := testcluster.StartTLS(t, bin, 3, clientTLS, args...)
	li := c.Leader()
	addr, pid := c.Procs[li].Addr, c.Pid(li)
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	honest := dial()
	const workers, maxCycles = 4, 3000
	// Warm up (connection, TLS, first entries), then the baseline.
	honestLoad(honest, workers, 20, nil, "warm")
	stop := make(chan struct{})
	time.AfterFunc(3*time.Second, func() { close(stop) })
	before, errsBefore := honestLoad(honest, workers, maxCycles, stop, "before")
	rssBefore, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}

	// The abuse, with the honest load running alongside.
	var peakRSS atomic.Int64
	peakRSS.Store(rssBefore)
	abuseDone := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-abuseDone:
				return
			case <-tick.C:
				if v, err := vmRSS(pid); err == nil && v > peakRSS.Load() {
					peakRSS.Store(v)
				}
			}
		}
	}()
	duringStop := make(chan struct{})
	var during []time.Duration
	var errsDuring int
	honestDone := make(chan struct{})
	go func() {
		defer close(honestDone)
		during, errsDuring = honestLoad(honest, workers, maxCycles, duringStop, "during")
	}()

	// The abuser runs in its own process (this test binary again), so that
	// its 1 GiB of marshalled requests is not collected on the honest
	// client's time.
	abuseCtx, abuseCancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer abuseCancel()
	abuser := exec.CommandContext(abuseCtx, abuserBin, "-test.run", "^TestLimitsAbuser$", "-test.short", "-test.v", "-test.count=1")
	abuser.Env = append(os.Environ(), "LEASEFENCE_E2E_ABUSE="+addr, "LEASEFENCE_E2E_ABUSE_CAP="+strconv.Itoa(capN), "LEASEFENCE_E2E_ABUSE_CERTS="+dir)
	var abuseOut strings.Builder
	abuser.Stdout, abuser.Stderr = &abuseOut, &abuseOut
	if err := abuser.Start(); err != nil {
		t.Fatal(err)
	}
	// A new certified client while the flood is on.
	time.Sleep(300 * time.Millisecond)
	newStart := time.Now()
	newConn := dial()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, newErr := api.NewLeaseServiceClient(newConn).Acquire(ctx, &api.AcquireRequest{Resource: "honest/new", Holder: "new", Ttl: durationpb.New(10 * time.Second)})
	cancel()
	newLatency := time.Since(newStart)
	abuseErr := abuser.Wait()
	var res abuseResult
	if line, ok := findLine(abuseOut.String(), "ABUSE-RESULT "); !ok || json.Unmarshal([]byte(line), &res) != nil || abuseErr != nil {
		t.Fatalf("abuser: %v\n%s", abuseErr, abuseOut.String())
	}
	// Keep the honest load on for at least as long as the baseline ran.
	time.Sleep(max(0, 3*time.Second-time.Since(newStart)))
	close(duringStop)
	<-honestDone
	close(abuseDone)
	<-samplerDone
	rssAfter, _ := vmRSS(pid)

	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	p50b, p99b := percentile(before, 0.50), percentile(before, 0.99)
	p50d, p99d := percentile(during, 0.50), percentile(during, 0.99)
	ratio := float64(p99d) / float64(max(p99b, 1))
	t.Logf("leased %s, limits flags %v, leader n%d pid %d", bin, withLimits, li+1, pid)
	t.Logf("honest before: %d cycles, %d errors, p50 %v, p99 %v", len(before), errsBefore, p50b, p99b)
	t.Logf("honest during: %d cycles, %d errors, p50 %v, p99 %v (p99 ratio %.2f)", len(during), errsDuring, p50d, p99d, ratio)
	t.Logf("silent connections: %d opened, %d closed by the node within ~1s (cap %d, handshake reserve %d)", res.Opened, res.Closed, capN, transport.DefaultHandshakeReserve)
	t.Logf("15 MiB requests: %d refused with ResourceExhausted, %d otherwise (%s)", res.Refused, res.Other, res.FirstOther)
	t.Logf("new certified client during the flood: %v in %v", newErr, newLatency)
	t.Logf("leader RSS: before %s, peak during %s, after %s", mib(rssBefore), mib(peakRSS.Load()), mib(rssAfter))

	if res.Other != 0 || res.Refused != 64 {
		t.Errorf("%d of 64 15 MiB requests were not refused with ResourceExhausted", 64-res.Refused)
	}
	// Past the cap, and the handshake reserve past it, the silent ones give
	// way (the connections of the honest and the big clients took slots).
	if res.Closed < res.Opened-capN-transport.DefaultHandshakeReserve {
		t.Errorf("only %d of %d silent connections closed, cap %d + reserve %d", res.Closed, res.Opened, capN, transport.DefaultHandshakeReserve)
	}
	if newErr != nil {
		t.Errorf("a new certified client during the flood: %v", newErr)
	}
	if errsDuring > 0 {
		t.Errorf("%d honest cycles failed during the abuse", errsDuring)
	}
	if growth := peakRSS.Load() - rssBefore; growth > 128<<20 {
		t.Errorf("leader RSS grew by %s during the abuse (bound 128 MiB)", mib(growth))
	}
	// Loose: a shared 2-core machine; the figures above are the result.
	if ratio > 20 {
		t.Errorf("honest p99 rose %.1f-fold during the abuse", ratio)
	}
}

// buildAbuser compiles this package's tests without the race detector, to
// run TestLimitsAbuser from: the abuser is a load generator, not code under
// test, and under the detector, beside the rest of make test on 2 cores, it
// was slow enough for its own calls to time out.
func buildAbuser(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "e2e-abuser.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the abuser: %v\n%s", err, out)
	}
	return bin
}

// abuseResult is what the abuser process reports.
type abuseResult struct {
	Opened, Closed int   // silent connections
	Refused, Other int64 // 15 MiB requests: ResourceExhausted or anything else
	FirstOther     string
}

func findLine(out, prefix string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// TestLimitsAbuser is the abusive client of
// TestAbusiveClientIsRefusedWhileHonestClientsAreServed, run in a process
// of its own; it does nothing unless LEASEFENCE_E2E_ABUSE names a node.
// It opens twice the cap in silent TCP connections, sends 32 × 2 requests
// of 15 MiB from a certified client, counts which silent connections the
// node closed within a second, and prints the result as JSON.
func TestLimitsAbuser(t *testing.T) {
	addr := os.Getenv("LEASEFENCE_E2E_ABUSE")
	if addr == "" {
		t.Skip("the abuser of TestAbusiveClientIsRefusedWhileHonestClientsAreServed")
	}
	capN, _ := strconv.Atoi(os.Getenv("LEASEFENCE_E2E_ABUSE_CAP"))
	dir := os.Getenv("LEASEFENCE_E2E_ABUSE_CERTS")
	clientTLS, err := client.LoadTLS(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	var res abuseResult
	var raw []net.Conn
	for i := 0; i < 2*capN; i++ {
		rc, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Logf("silent connection %d: %v", i, err)
			break
		}
		raw = append(raw, rc)
	}
	defer func() {
		for _, rc := range raw {
			rc.Close()
		}
	}()
	res.Opened = len(raw)
	big := strings.Repeat("b", 15<<20)
	var refused, other atomic.Int64
	var firstOther sync.Once
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	for i := 0; i < 4; i++ {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := api.NewLeaseServiceClient(conns[g%len(conns)])
			for i := 0; i < 2; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := lc.Acquire(ctx, &api.AcquireRequest{Resource: fmt.Sprintf("big/%d", g), Holder: big, Ttl: durationpb.New(10 * time.Second)})
				cancel()
				if status.Code(err) == codes.ResourceExhausted {
					refused.Add(1)
				} else {
					other.Add(1)
					firstOther.Do(func() { res.FirstOther = fmt.Sprint(err) })
				}
			}
		}()
	}
	wg.Wait()
	res.Refused, res.Other = refused.Load(), other.Load()
	deadline := time.Now().Add(time.Second)
	for _, rc := range raw {
		_ = rc.SetReadDeadline(deadline)
		if _, err := rc.Read(make([]byte, 1)); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				res.Closed++
			}
		}
	}
	b, _ := json.Marshal(res)
	fmt.Printf("ABUSE-RESULT %s\n", b)
}
