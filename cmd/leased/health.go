package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/flagenv"
)

// health is "leased health": one grpc.health.v1 Check against a node, for
// container health checks in an image that holds nothing but leased and
// leasectl (grpc_health_probe's conventions: exit 0 when SERVING, 1
// otherwise, 2 on bad usage). The TLS flags read the node's own
// LEASEFENCE_TLS_* variables, so inside the node's container it needs no
// flags at all.
func health(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leased health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := "7001"
	if _, p, err := net.SplitHostPort(os.Getenv("LEASEFENCE_LISTEN")); err == nil && p != "" {
		port = p
	}
	addr := fs.String("addr", net.JoinHostPort("127.0.0.1", port), "host:port of the node's gRPC port (default: loopback and the port of LEASEFENCE_LISTEN)")
	service := fs.String("service", "", `service whose status to check ("" the node, or leasefence.v1.LeaseService)`)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	var certFile, keyFile, caFile, serverName string
	fs.StringVar(&certFile, "tls-cert", "", "PEM client certificate (the node's own will do)")
	fs.StringVar(&keyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&caFile, "tls-ca", "", "PEM CA certificate(s) that sign the node's certificate")
	fs.StringVar(&serverName, "server-name", "", "name to verify the node's certificate against (default: the host of LEASEFENCE_ADVERTISE, else of --addr)")
	if err := flagenv.Apply(fs, "LEASEFENCE_"); err != nil {
		fmt.Fprintln(stderr, "leased health:", err)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leased health: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	creds := insecure.NewCredentials()
	if certFile != "" || keyFile != "" || caFile != "" {
		if serverName == "" {
			if h, _, err := net.SplitHostPort(os.Getenv("LEASEFENCE_ADVERTISE")); err == nil {
				serverName = h
			}
		}
		tc, err := probeTLS(certFile, keyFile, caFile, serverName)
		if err != nil {
			fmt.Fprintln(stderr, "leased health:", err)
			return 2
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintln(stderr, "leased health:", err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: *service})
	if err != nil {
		fmt.Fprintf(stderr, "leased health: %s: %v\n", *addr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", *addr, resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return 1
	}
	return 0
}

// probeTLS is the client side of mutual TLS for the probe: the client
// library's TLS settings, all three files required (a node with TLS asks
// every caller for a certificate).
func probeTLS(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
	}
	tc, err := client.LoadTLS(certFile, keyFile, caFile)
	if err != nil {
		return nil, err
	}
	tc.ServerName = serverName
	return tc, nil
}
