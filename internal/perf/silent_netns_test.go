package perf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/internal/netns"
	"github.com/leasefence/leasefence/internal/testcluster"
)

// BenchmarkFailoverSilentNetns is BenchmarkFailoverSilent with each node
// in a network namespace of its own (jepsen's namespace mode) and the
// leader made silent by iptables DROP of every packet into and out of its
// namespace, clients' included, instead of SIGSTOP: no packet, no
// handshake, no reset, while the process runs on. Root only; the
// namespaces, bridge and rules are removed at the end.
//
//	sudo go test -run '^$' -bench FailoverSilentNetns -benchtime 1x -timeout 20m ./internal/perf/
func BenchmarkFailoverSilentNetns(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (network namespaces, iptables)")
	}
	bin, cleanup, err := testcluster.BuildForBenchmarks()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	for _, first := range []string{"leader-first", "follower-first"} {
		b.Run(first, func(b *testing.B) {
			ids := []string{"n1", "n2", "n3"}
			nsnet, err := netns.NewNSNet(ids)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { nsnet.Close() })
			var addrs, peers []string
			for _, id := range ids {
				addrs = append(addrs, nsnet.Addr(id))
				peers = append(peers, id+"="+nsnet.Addr(id))
			}
			dir := b.TempDir()
			var conns []*grpc.ClientConn
			for i, id := range ids {
				prog, args := nsnet.Command(id, bin, []string{"--insecure", "--log-level", "warn", "--id", id, "--listen", addrs[i],
					"--data-dir", filepath.Join(dir, id), "--bootstrap", strings.Join(peers, ",")})
				logf, err := os.Create(filepath.Join(dir, id+".log"))
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(prog, args...)
				cmd.Stdout, cmd.Stderr = logf, logf
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
				conn, err := grpc.NewClient(addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { conn.Close() })
				conns = append(conns, conn)
			}
			status := func(i int) (*api.StatusResponse, error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				return api.NewClusterServiceClient(conns[i]).Status(ctx, &api.StatusRequest{})
			}
			silentTrials(b, first, addrs, status, func(i int, on bool) {
				if err := nsnet.Silence(ids[i], on); err != nil {
					b.Fatal(fmt.Errorf("silence %s %v: %w", ids[i], on, err))
				}
			})
		})
	}
}
