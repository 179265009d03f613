package testcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/internal/loopback"
)

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
	dir, err := os.MkdirTemp("", "leasefence-embedded-")
	if err != nil {
		panic(err)
	}
	addrs, err = loopback.FreeAddrs(n)
	if err != nil {
		panic(err)
	}
	peers := map[string]string{}
	for i, a := range addrs {
		peers[fmt.Sprintf("n%d", i+1)] = a
	}
	var nodes []*cluster.Node
	stop = func() {
		for _, nd := range nodes {
			nd.Close()
		}
		os.RemoveAll(dir)
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
			panic(err)
		}
		nodes = append(nodes, node)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, nd := range nodes {
			if nd.IsLeader() {
				return addrs, stop
			}
		}
		if time.Now().After(deadline) {
			stop()
			panic("embedded cluster elected no leader within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
