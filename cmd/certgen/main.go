// Command certgen writes development certificates for a mutual-TLS
// leasefence cluster (`make certs`): a CA, a peer certificate per node and a
// client certificate, made with Go's crypto only.
//
//	certgen --dir certs --nodes n1,n2,n3 --clients client
//
// Files: ca.crt ca.key, <node>.crt <node>.key, <client>.crt <client>.key.
// Node certificates carry the SANs 127.0.0.1, ::1, localhost and the peer
// identity URI; client certificates do not carry the peer identity.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leasefence/leasefence/internal/certgen"
	"github.com/leasefence/leasefence/transport"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("certgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "certs", "directory to write into (created; existing files are overwritten)")
	nodes := fs.String("nodes", "n1,n2,n3", "comma-separated node ids: one peer certificate each")
	clients := fs.String("clients", "client", "comma-separated client names: one client certificate each")
	peer := fs.String("peer-identity", transport.DefaultPeerIdentity, "URI SAN that marks node certificates (leased --peer-identity)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "certgen: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	files, err := certgen.WriteCluster(*dir, split(*nodes), split(*clients), *peer)
	for _, f := range files {
		fmt.Fprintln(stdout, "wrote", f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "certgen:", err)
		return 1
	}
	return 0
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
