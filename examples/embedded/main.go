// Command embedded is an application that runs a leasefence node inside
// its own process (package cluster's embedding API) and uses the Go client
// against it. Run three copies with different -id and -listen and the same
// -peers to get a replicated cluster embedded in three application
// instances; one copy alone is a one-node cluster.
//
//	go run ./examples/embedded -id n1 -listen 127.0.0.1:7101 -peers n1=127.0.0.1:7101
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/cluster"
)

func main() {
	id := flag.String("id", "n1", "node id")
	listen := flag.String("listen", "127.0.0.1:7101", "address the embedded node serves on")
	peers := flag.String("peers", "n1=127.0.0.1:7101", "founding members id=addr,...")
	dataDir := flag.String("data-dir", "", "data dir (default: a temporary one)")
	flag.Parse()
	if err := run(*id, *listen, *peers, *dataDir); err != nil {
		log.Fatal(err)
	}
}

func run(id, listen, peers, dataDir string) error {
	if dataDir == "" {
		d, err := os.MkdirTemp("", "embedded-"+id+"-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dataDir = d
	}
	bootstrap, err := cluster.ParsePeers(peers)
	if err != nil {
		return err
	}
	cfg := cluster.DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir, cfg.Bootstrap = id, listen, dataDir, bootstrap
	node, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	defer node.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.Dial(ctx, node.Addr())
	if err != nil {
		return err
	}
	defer c.Close()

	// The application's work: hold "report/daily" while writing the report,
	// passing the fencing token with every write.
	for ctx.Err() == nil {
		lease, err := c.Acquire(ctx, "report/daily", client.WithTTL(5*time.Second), client.WithHolder(id), client.WithWait())
		if err != nil {
			return err
		}
		fmt.Printf("%s holds report/daily with token %d until %s\n", id, lease.Token(), lease.SafeUntil().Format(time.TimeOnly))
		select {
		case <-time.After(3 * time.Second): // the work, bounded by lease.Context()
		case <-lease.Done():
		case <-ctx.Done():
		}
		if err := lease.Release(context.Background()); err != nil {
			return err
		}
	}
	return nil
}
