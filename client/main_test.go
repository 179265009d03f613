package client_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/internal/testcluster"
)

var leasedBin string

func TestMain(m *testing.M) {
	flag.Parse()
	bin, cleanup, err := testcluster.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	leasedBin = bin
	var stopExampleNode func()
	endpoint, stopExampleNode = testcluster.StartEmbedded()
	code := m.Run()
	stopExampleNode()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func startCluster(t *testing.T, extra ...string) *testcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real leased processes")
	}
	return testcluster.Start(t, leasedBin, 3, extra...)
}
