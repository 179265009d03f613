package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/loopback"
)

// Local is a cluster running inside this process: n nodes with default
// settings, real gRPC on loopback, raft-boltdb in a temporary directory.
type Local struct {
	dir   string
	nodes []*cluster.Node
	logs  []hclog.Logger
}

// StartLocal starts an n-node cluster under a new temporary directory in
// dataDir ("" means os.TempDir()) and waits up to 15s (or until ctx ends)
// for a leader.
func StartLocal(ctx context.Context, n int, dataDir string) (*Local, error) {
	dir, err := os.MkdirTemp(dataDir, "leasebench-")
	if err != nil {
		return nil, fmt.Errorf("bench: local cluster: %w", err)
	}
	lc := &Local{dir: dir}
	// Free ports; the nodes bind them again a moment later.
	addrs, err := loopback.FreeAddrs(n)
	if err != nil {
		lc.Close()
		return nil, fmt.Errorf("bench: local cluster: %w", err)
	}
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprintf("n%d", i+1)] = a
	}
	for i, a := range addrs {
		cfg := cluster.DefaultConfig()
		cfg.ID, cfg.Listen, cfg.DataDir = fmt.Sprintf("n%d", i+1), a, filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		cfg.Bootstrap = peers
		cfg.Insecure = true // loopback, in-process benchmark only
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Error, Output: os.Stderr})
		lc.logs = append(lc.logs, cfg.Logger)
		node, err := cluster.Start(cfg)
		if err != nil {
			lc.Close()
			return nil, fmt.Errorf("bench: local cluster: start %s: %w", cfg.ID, err)
		}
		lc.nodes = append(lc.nodes, node)
	}
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for lc.leader() < 0 {
		select {
		case <-poll.C:
		case <-deadline.C:
			lc.Close()
			return nil, errors.New("bench: local cluster elected no leader within 15s")
		case <-ctx.Done():
			lc.Close()
			return nil, ctx.Err()
		}
	}
	return lc, nil
}

func (lc *Local) leader() int {
	for i, nd := range lc.nodes {
		if nd.IsLeader() {
			return i
		}
	}
	return -1
}

// Endpoints returns the nodes' addresses, the leader first: the client
// sends to its first endpoint, and a follower would forward every call.
func (lc *Local) Endpoints() []string {
	var out []string
	if i := lc.leader(); i >= 0 {
		out = append(out, lc.nodes[i].Addr())
	}
	for _, nd := range lc.nodes {
		if len(out) == 0 || nd.Addr() != out[0] {
			out = append(out, nd.Addr())
		}
	}
	return out
}

// Close stops every node and removes the data.
func (lc *Local) Close() error {
	for _, l := range lc.logs {
		l.SetLevel(hclog.Off) // peers going away one by one is expected now
	}
	var errs []error
	for _, nd := range lc.nodes {
		errs = append(errs, nd.Close())
	}
	errs = append(errs, os.RemoveAll(lc.dir))
	return errors.Join(errs...)
}

// LeaderFirst asks the nodes at endpoints who leads, polling until one
// names a leader or 15s (or ctx) pass, and returns endpoints with the
// leader's address first: the client sends to its first endpoint, and a
// follower would forward every call to the leader (one more hop).
func LeaderFirst(ctx context.Context, endpoints []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var last error
	for {
		for _, e := range endpoints {
			addr, err := leaderOf(ctx, e)
			if err != nil {
				last = err
				continue
			}
			if addr == "" {
				last = fmt.Errorf("%s knows no leader yet", e)
				continue
			}
			out := []string{addr}
			for _, o := range endpoints {
				if o != addr {
					out = append(out, o)
				}
			}
			return out, nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bench: no leader found at %v: %v", endpoints, last)
		}
	}
}

func leaderOf(ctx context.Context, endpoint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := status(ctx, endpoint)
	if err != nil {
		return "", err
	}
	return st.LeaderAddr, nil
}

// status asks one node for its status over a connection of its own.
func status(ctx context.Context, endpoint string) (*api.StatusResponse, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
}
