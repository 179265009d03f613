package perf

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/client"
)

// BenchmarkFailoverSilent freezes the leader with SIGSTOP 20 times (a
// silent leader: its kernel still accepts connections and acknowledges
// data, the process answers nothing, no reset) and measures, as the Go
// client sees it, the time from the freeze to the first successful
// acquire: one client (default Config, the three nodes as endpoints) calls
// Acquire with a 10 s deadline, again after each failure, until one
// succeeds. Every failure is counted: a quorum is up the whole time. With
// "leader-first" the frozen leader is the client's first endpoint (a
// client that followed leader hints sits on the leader); with
// "follower-first" a follower is, and must forward to the frozen leader.
// Default raft settings; before each trial the benchmark waits until every
// node agrees on the leader and has caught up.
//
//	go test -run '^$' -bench FailoverSilent -benchtime 1x -timeout 20m ./internal/perf/
func BenchmarkFailoverSilent(b *testing.B) {
	for _, first := range []string{"leader-first", "follower-first"} {
		b.Run(first, func(b *testing.B) {
			c := start(b)
			var addrs []string
			for _, p := range c.Procs {
				addrs = append(addrs, p.Addr)
			}
			silentTrials(b, first, addrs, c.Status, func(i int, on bool) {
				if on {
					c.Signal(i, syscall.SIGSTOP)
					waitStopped(b, c.Pid(i))
				} else {
					c.Signal(i, syscall.SIGCONT)
				}
			})
		})
	}
}

// silentTrials runs 20 trials on the three nodes at addrs: wait until
// they agree on a leader, make it silent with silence(i, true), time the
// first grant a default client gets (endpoints in the order first names),
// end the silence, and report median, p90, max and the failed calls.
func silentTrials(b *testing.B, first string, addrs []string, status func(int) (*api.StatusResponse, error), silence func(i int, on bool)) {
	var gaps []time.Duration
	failed := 0
	for k := 0; k < 20; k++ {
		li := settledOf(b, addrs, status)
		order := []int{li, (li + 1) % 3, (li + 2) % 3}
		if first == "follower-first" {
			order = []int{(li + 1) % 3, li, (li + 2) % 3}
		}
		var eps []string
		for _, i := range order {
			eps = append(eps, addrs[i])
		}
		cl, err := client.New(client.Config{Endpoints: eps})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := cl.Acquire(ctx, fmt.Sprintf("warm/%d", k), client.WithTTL(10*time.Second))
		cancel()
		if err != nil {
			b.Fatalf("trial %d, before the leader went silent: %v", k, err)
		}
		l.Release(context.Background())

		silence(li, true)
		lost := time.Now()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := cl.Acquire(ctx, fmt.Sprintf("silent/%d", k), client.WithTTL(10*time.Second))
			cancel()
			if err == nil {
				gaps = append(gaps, time.Since(lost))
				l.Release(context.Background())
				break
			}
			failed++
			b.Logf("trial %d: acquire failed %v after the leader went silent: %v", k, time.Since(lost), err)
			if time.Since(lost) > time.Minute {
				silence(li, false)
				b.Fatalf("trial %d: no grant within a minute", k)
			}
		}
		cl.Close()
		silence(li, false)
	}
	b.ReportMetric(percentile(gaps, 0.5).Seconds(), "median-s")
	b.ReportMetric(percentile(gaps, 0.9).Seconds(), "p90-s")
	b.ReportMetric(percentile(gaps, 1).Seconds(), "max-s")
	b.ReportMetric(float64(failed), "failed-calls")
	b.Logf("silent failover gaps: %v", gaps)
}

// waitStopped waits until process pid is stopped (state T in
// /proc/PID/stat): a signal is delivered asynchronously, and a grant the
// leader served after the kill(2) is no failover.
func waitStopped(b *testing.B, pid int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
		if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("process %d not stopped after 5s", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// settledOf waits until every node at addrs reports the same term and
// the same leader, and has applied what that leader had committed, and
// returns the leader's index. (A leader resumed after a freeze says
// "leader" until it hears of the newer term: asking one node is not
// enough.)
func settledOf(b *testing.B, addrs []string, status func(int) (*api.StatusResponse, error)) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if li, ok := agreedLeaderOf(addrs, status); ok {
			return li
		}
		if time.Now().After(deadline) {
			b.Fatal("the nodes did not agree on a leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agreedLeaderOf returns the leader every node at addrs (asked with
// status) agrees on, once all have applied what it had committed.
func agreedLeaderOf(addrs []string, status func(i int) (*api.StatusResponse, error)) (int, bool) {
	li := -1
	var term, commit uint64
	var sts []*api.StatusResponse
	for i := range addrs {
		st, err := status(i)
		if err != nil {
			return 0, false
		}
		sts = append(sts, st)
		if st.State == "leader" {
			if li >= 0 {
				return 0, false
			}
			li, term, commit = i, st.Term, st.CommitIndex
		}
	}
	if li < 0 {
		return 0, false
	}
	for _, st := range sts {
		if st.Term != term || st.LeaderAddr != addrs[li] || st.AppliedIndex < commit {
			return 0, false
		}
	}
	return li, true
}
