package testcluster

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/loopback"
)

// Main is a TestMain for the packages whose tests run against real leased
// processes and whose Example tests run against an embedded node: it builds
// leased (race) into *bin, starts a one-node embedded cluster at *endpoint,
// runs the tests, stops and removes both, and exits with the tests' status.
// leaks, when not nil, runs after tests that passed; its error (a
// goroutine leak) fails the binary.
func Main(m *testing.M, bin, endpoint *string, leaks func() error) {
	flag.Parse()
	b, cleanup, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	*bin = b
	var stop func()
	*endpoint, stop = StartEmbedded()
	code := m.Run()
	stop()
	cleanup()
	if code == 0 && leaks != nil {
		if err := leaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// StartEmbedded starts a one-node cluster inside this process (the
// embedding API) on a free loopback port, waits until it leads, and returns
// its address. It is what Example tests run against. It panics on failure:
// it is called from TestMain, before any *testing.T exists.
func StartEmbedded() (addr string, stop func()) {
	addrs, stop := StartEmbeddedN(1)
	return addrs[0], stop
}

// StartEmbeddedN starts an n-node cluster inside this process (real gRPC
// on loopback, raft-boltdb in temporary dirs), waits for a leader, and
// returns the nodes' addresses.
func StartEmbeddedN(n int) (addrs []string, stop func()) {
	_, addrs, stop, err := embedded(n)
	if err != nil {
		panic(err)
	}
	return addrs, stop
}

// Nodes starts an n-node cluster inside this process as StartEmbeddedN
// does, for a test or benchmark that needs the nodes themselves (in-process
// dialing, what a node costs its host); they are closed when tb ends.
func Nodes(tb testing.TB, n int) []*cluster.Node {
	tb.Helper()
	nodes, _, stop, err := embedded(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return nodes
}

// embedded starts n nodes n1..nN bootstrapped together on free loopback
// addresses, data in one temporary dir that stop removes, and waits up to
// 15 s for a leader. On error nothing is left running.
func embedded(n int) (nodes []*cluster.Node, addrs []string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "leasefence-embedded-")
	if err != nil {
		return nil, nil, nil, err
	}
	stop = func() {
		for _, nd := range nodes {
			nd.Close()
		}
		os.RemoveAll(dir)
	}
	if addrs, err = loopback.FreeAddrs(n); err != nil {
		stop()
		return nil, nil, nil, err
	}
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprintf("n%d", i+1)] = a
	}
	for i, a := range addrs {
		cfg := cluster.DefaultConfig()
		cfg.ID, cfg.Listen, cfg.DataDir = fmt.Sprintf("n%d", i+1), a, filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		cfg.Bootstrap = peers
		cfg.Insecure = true // loopback, tests only
		cfg.Logger = hclog.NewNullLogger()
		node, err := cluster.Start(cfg)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		nodes = append(nodes, node)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, nd := range nodes {
			if nd.IsLeader() {
				return nodes, addrs, stop, nil
			}
		}
	}
	stop()
	return nil, nil, nil, errors.New("embedded cluster elected no leader within 15s")
}
