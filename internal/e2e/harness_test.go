// Package e2e runs real leased processes on loopback (internal/testcluster)
// and kills them with real signals. It is test-only.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/leasefence/leasefence/internal/testcluster"
)

var leasedBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	bin, cleanup, err := testcluster.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	leasedBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func startCluster(t *testing.T, n int, extra ...string) *testcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes")
	}
	return testcluster.Start(t, leasedBin, n, extra...)
}
