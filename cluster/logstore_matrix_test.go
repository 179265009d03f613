package cluster

import "os"

// LEASEFENCE_LOG_STORE=wal runs this package's tests with the raft-wal log
// store as the default (the same variable sets leased's --log-store, so
// internal/e2e's processes follow it too):
//
//	LEASEFENCE_LOG_STORE=wal go test -run 'Corrupt|Durab|Restart|Integrity|Snapshot|Log' ./cluster/ ./internal/e2e/
func init() {
	if v := os.Getenv("LEASEFENCE_LOG_STORE"); v != "" {
		defaultLogStore = v
	}
}
