// Command embedded is an application that runs a leasefence node inside
// its own process (package cluster's embedding API) and uses the Go client
// against it. Run three copies with different -id and -listen and the same
// -peers to get a replicated cluster embedded in three application
// instances; one copy alone is a one-node cluster.
//
//	go run ./examples/embedded -id n1 -listen 127.0.0.1:7101 -peers n1=127.0.0.1:7101 -insecure
//
// The node keeps its state in -data-dir (default data/embedded-<id>), so
// tokens continue across restarts of the application, as they must. Like
// leased, it needs TLS files (-tls-cert, -tls-key, -tls-ca; make certs
// writes development ones) or an explicit -insecure for plaintext on a
// development machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/transport"
)

func main() {
	id := flag.String("id", "n1", "node id")
	listen := flag.String("listen", "127.0.0.1:7101", "address the embedded node serves on")
	peers := flag.String("peers", "n1=127.0.0.1:7101", "founding members id=addr,...")
	dataDir := flag.String("data-dir", "", "data dir, kept across restarts (default data/embedded-<id>)")
	insecure := flag.Bool("insecure", false, "serve plaintext: local development only")
	var tlsFiles transport.TLSFiles
	flag.StringVar(&tlsFiles.CertFile, "tls-cert", "", "node certificate (PEM)")
	flag.StringVar(&tlsFiles.KeyFile, "tls-key", "", "node key (PEM)")
	flag.StringVar(&tlsFiles.CAFile, "tls-ca", "", "cluster CA (PEM)")
	flag.Parse()
	if *dataDir == "" {
		*dataDir = filepath.Join("data", "embedded-"+*id)
	}
	if err := run(*id, *listen, *peers, *dataDir, *insecure, tlsFiles); err != nil {
		log.Fatal(err)
	}
}

func run(id, listen, peers, dataDir string, insecure bool, tlsFiles transport.TLSFiles) error {
	bootstrap, err := cluster.ParsePeers(peers)
	if err != nil {
		return err
	}
	cfg := cluster.DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir, cfg.Bootstrap = id, listen, dataDir, bootstrap
	cfg.Insecure, cfg.TLS = insecure, tlsFiles
	node, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	defer node.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ccfg := client.Config{Endpoints: []string{node.Addr()}}
	if tlsFiles.Enabled() {
		// The example's own client presents the node's certificate; an
		// application would have a client certificate of its own.
		if ccfg.TLS, err = client.LoadTLS(tlsFiles.CertFile, tlsFiles.KeyFile, tlsFiles.CAFile); err != nil {
			return err
		}
	}
	c, err := client.New(ccfg)
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
