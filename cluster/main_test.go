package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// hashicorp/raft's metrics sink and go-metrics start package-level
		// goroutines that live for the process.
		goleak.IgnoreAnyFunction("github.com/armon/go-metrics.(*InmemSink).run"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/go-metrics.(*InmemSink).run"),
		// raft never answers a future whose entry was committed but not
		// applied when it shut down (runFSM returns on shutdown with work
		// queued); Node.await stops waiting, the reader goroutine stays.
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*deferError).Error"),
	)
}
