package testcluster

import (
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/leasefence/leasefence/cluster"
)

// StartEmbedded starts a one-node cluster inside this process (the
// embedding API) on a free loopback port, waits until it leads, and returns
// its address. It is what Example tests run against. It panics on failure:
// it is called from TestMain, before any *testing.T exists.
func StartEmbedded() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "leasefence-embedded-")
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr = l.Addr().String()
	l.Close()
	cfg := cluster.DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = "n1", addr, dir
	cfg.Bootstrap = map[string]string{"n1": addr}
	cfg.Logger = hclog.NewNullLogger()
	node, err := cluster.Start(cfg)
	if err != nil {
		panic(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !node.IsLeader() {
		if time.Now().After(deadline) {
			panic("embedded node did not lead within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr, func() { node.Close(); os.RemoveAll(dir) }
}
