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
	"github.com/leasefence/leasefence/internal/testcluster"
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
			var gaps []time.Duration
			failed := 0
			for k := 0; k < 20; k++ {
				li := settled(b, c)
				order := []int{li, (li + 1) % 3, (li + 2) % 3}
				if first == "follower-first" {
					order = []int{(li + 1) % 3, li, (li + 2) % 3}
				}
				var eps []string
				for _, i := range order {
					eps = append(eps, c.Procs[i].Addr)
				}
				cl, err := client.New(client.Config{Endpoints: eps})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := cl.Acquire(ctx, fmt.Sprintf("warm/%d", k), client.WithTTL(10*time.Second))
				cancel()
				if err != nil {
					b.Fatalf("trial %d, before the freeze: %v", k, err)
				}
				l.Release(context.Background())

				c.Signal(li, syscall.SIGSTOP)
				waitStopped(b, c.Pid(li))
				frozen := time.Now()
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					l, err := cl.Acquire(ctx, fmt.Sprintf("silent/%d", k), client.WithTTL(10*time.Second))
					cancel()
					if err == nil {
						gaps = append(gaps, time.Since(frozen))
						l.Release(context.Background())
						break
					}
					failed++
					b.Logf("trial %d: acquire failed %v after the freeze: %v", k, time.Since(frozen), err)
					if time.Since(frozen) > time.Minute {
						b.Fatalf("trial %d: no grant within a minute of the freeze", k)
					}
				}
				cl.Close()
				c.Signal(li, syscall.SIGCONT)
			}
			b.ReportMetric(percentile(gaps, 0.5).Seconds(), "median-s")
			b.ReportMetric(percentile(gaps, 0.9).Seconds(), "p90-s")
			b.ReportMetric(percentile(gaps, 1).Seconds(), "max-s")
			b.ReportMetric(float64(failed), "failed-calls")
			b.Logf("silent failover gaps: %v", gaps)
		})
	}
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

// settled waits until every node reports the same term and the same
// leader, and has applied what that leader had committed, and returns the
// leader's index. (A leader resumed after a freeze says "leader" until it
// hears of the newer term: asking one node is not enough.)
func settled(b *testing.B, c *testcluster.Cluster) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if li, ok := agreedLeader(c); ok {
			return li
		}
		if time.Now().After(deadline) {
			b.Fatal("the nodes did not agree on a leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func agreedLeader(c *testcluster.Cluster) (int, bool) {
	li := -1
	var term, commit uint64
	var sts []*api.StatusResponse
	for i := range c.Procs {
		st, err := c.Status(i)
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
		if st.Term != term || st.LeaderAddr != c.Procs[li].Addr || st.AppliedIndex < commit {
			return 0, false
		}
	}
	return li, true
}
