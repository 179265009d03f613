// Command embedded is an application that runs a leasefence node inside
// its own process (package cluster's embedding API). Three copies with
// different -id and -listen and the same -peers form a replicated cluster
// embedded in three application instances; among them they elect one
// writer, which writes a report into a store shared by all three (a bbolt
// file), every write carrying the writer's fencing token and checked by a
// fence guard there. docs/EMBEDDING.md walks through it;
// scripts/embedded-demo.sh (make embedded-demo) runs three instances, kills
// and freezes them, and shows what the guard refuses.
//
//	go run ./examples/embedded -id n1 -listen 127.0.0.1:7101 -peers n1=127.0.0.1:7101 -insecure
//
// The node keeps its state in -data-dir (default data/embedded-<id>), so
// tokens continue across restarts of the application, as they must. Like
// leased, it needs TLS files (-tls-cert, -tls-key, -tls-ca; make certs
// writes development ones) or an explicit -insecure for plaintext on a
// development machine. The application talks to its own node in memory
// (client.Config.InProcess), without a socket.
//
// With -show it prints the shared store's report and exits.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/cluster"
	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencebolt"
	"github.com/leasefence/leasefence/transport"
)

// resource is the lease the instances compete for; its token is the
// fencing token of the report.
const resource = "report/daily"

type options struct {
	id, listen, peers, join, dataDir, store string
	insecure                                bool
	tls                                     transport.TLSFiles
	ttl, prepare                            time.Duration
	logLevel                                string
}

func main() {
	var o options
	flag.StringVar(&o.id, "id", "n1", "node id")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:7101", "address the embedded node serves peers and clients on")
	flag.StringVar(&o.peers, "peers", "n1=127.0.0.1:7101", "founding members id=addr,... (the same on every instance)")
	flag.StringVar(&o.join, "join", "", "on a first start, join the running cluster through this member's address instead of bootstrapping with -peers (a replacement instance)")
	flag.StringVar(&o.dataDir, "data-dir", "", "the node's data dir, kept across restarts (default data/embedded-<id>)")
	flag.StringVar(&o.store, "store", filepath.Join("data", "shared", "report.db"), "the shared store the writer writes the report into (bbolt file)")
	flag.BoolVar(&o.insecure, "insecure", false, "serve plaintext: local development only")
	flag.StringVar(&o.tls.CertFile, "tls-cert", "", "node certificate (PEM)")
	flag.StringVar(&o.tls.KeyFile, "tls-key", "", "node key (PEM)")
	flag.StringVar(&o.tls.CAFile, "tls-ca", "", "cluster CA (PEM)")
	flag.DurationVar(&o.ttl, "ttl", 3*time.Second, "ttl of the writer's lease")
	flag.DurationVar(&o.prepare, "prepare", time.Second, "time to prepare one section of the report before writing it")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the embedded node's log level")
	show := flag.Bool("show", false, "print the shared store's report and exit")
	flag.Parse()
	if o.dataDir == "" {
		o.dataDir = filepath.Join("data", "embedded-"+o.id)
	}
	var err error
	if *show {
		err = showReport(o.store)
	} else {
		err = run(o)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func run(o options) error {
	cfg := cluster.DefaultConfig()
	cfg.ID, cfg.Listen, cfg.DataDir = o.id, o.listen, o.dataDir
	if o.join != "" {
		cfg.Join = o.join
	} else {
		bootstrap, err := cluster.ParsePeers(o.peers)
		if err != nil {
			return err
		}
		cfg.Bootstrap = bootstrap
	}
	cfg.Insecure, cfg.TLS = o.insecure, o.tls
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "node", Level: hclog.LevelFromString(o.logLevel)})
	startCtx, cancelStart := context.WithTimeout(context.Background(), 30*time.Second)
	node, err := cluster.StartContext(startCtx, cfg)
	cancelStart()
	if err != nil {
		return err
	}
	defer func() {
		// Hands leadership to another instance first, if this one leads.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	}()

	// The application's client reaches its own node in memory; a follower
	// forwards to the leader, wherever it runs.
	c, err := client.New(client.Config{InProcess: &client.InProcess{Addr: node.Addr(), Dial: node.DialInProcess}})
	if err != nil {
		return err
	}
	defer c.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("%s: started, node at %s, data dir %s\n", o.id, node.Addr(), o.dataDir)
	for ctx.Err() == nil {
		// Wait to become the writer (first come, first served).
		lease, err := c.Acquire(ctx, resource, client.WithTTL(o.ttl), client.WithHolder(o.id), client.WithWait())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Printf("%s: acquire: %v; retrying\n", o.id, err)
			time.Sleep(time.Second)
			continue
		}
		fmt.Printf("%s: writer with token %d\n", o.id, lease.Token())
		err = write(ctx, lease, o)
		switch st, stale := fence.IsStale(err); {
		case stale:
			fmt.Printf("%s: write refused: stale token %d, the store has accepted %d\n", o.id, st.Presented, st.Highest)
		case err != nil:
			fmt.Printf("%s: write failed: %v\n", o.id, err)
		}
		if err := lease.Err(); err != nil {
			fmt.Printf("%s: lost the lease: %v\n", o.id, err)
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lease.Release(rctx) // refused harmlessly when already lost
		cancel()
	}
	return nil
}

// write writes the report, one section per o.prepare, for as long as the
// lease lasts (lease.Context() bounds the work) and the application runs
// (ctx). A section already prepared
// is written even if the lease ended meanwhile (an effect in flight, as
// after a GC pause or a frozen host): the guard at the store refuses it
// when a newer token has written there.
func write(ctx context.Context, lease *client.Lease, o options) error {
	tok := fence.TokenOf(lease) // scope report/daily, the lease's token
	for section := 1; ; section++ {
		select {
		case <-lease.Context().Done():
			return nil
		case <-ctx.Done():
			return nil
		default:
		}
		fmt.Printf("%s: preparing section %d with token %d\n", o.id, section, tok.Value)
		time.Sleep(o.prepare) // the work; it does not watch the lease
		if err := appendSection(o.store, tok, fmt.Sprintf("section %d by %s", section, o.id)); err != nil {
			return err
		}
		fmt.Printf("%s: wrote section %d with token %d\n", o.id, section, tok.Value)
	}
}

// openStore opens the shared store. bbolt lets one process at a time have
// it open, so each write opens and closes it.
func openStore(path string) (*bolt.DB, *fencebolt.Guard, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", path, err)
	}
	g, err := fencebolt.New(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, g, nil
}

var reportBucket = []byte("report")

// appendSection adds one line to the report if tok is not stale: the
// check, the line and the new highest token commit in one transaction.
func appendSection(path string, tok fence.Token, line string) error {
	db, g, err := openStore(path)
	if err != nil {
		return err
	}
	defer db.Close()
	return g.Update(tok, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(reportBucket)
		if err != nil {
			return err
		}
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, seq)
		return b.Put(key, fmt.Appendf(nil, "token %d: %s at %s", tok.Value, line, time.Now().UTC().Format(time.RFC3339Nano)))
	})
}

// showReport prints the report's lines in order and the highest token
// the store has accepted.
func showReport(path string) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	db, g, err := openStore(path)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(reportBucket)
		if b == nil {
			return errors.New("no report yet")
		}
		return b.ForEach(func(k, v []byte) error {
			fmt.Printf("%d %s\n", binary.BigEndian.Uint64(k), v)
			return nil
		})
	}); err != nil {
		return err
	}
	h, err := g.Highest(resource)
	if err != nil {
		return err
	}
	fmt.Printf("highest token accepted: %d\n", h)
	return nil
}
