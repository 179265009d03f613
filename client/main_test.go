package client_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/internal/testcluster"
)

var leasedBin string

func TestMain(m *testing.M) {
	testcluster.Main(m, &leasedBin, &endpoint, func() error { return goleak.Find() })
}

func startCluster(t *testing.T, extra ...string) *testcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real leased processes")
	}
	return testcluster.Start(t, leasedBin, 3, extra...)
}

// embeddedClient returns a client of the embedded node TestMain started,
// closed when the test ends, and a context that ends after d.
func embeddedClient(t *testing.T, d time.Duration) (*client.Client, context.Context) {
	t.Helper()
	return mustNew(t, client.Config{Endpoints: []string{endpoint}}), ctxFor(t, d)
}
