//go:build plantedbugs

package cluster

import "testing"

// The planted keepalive-no-heartbeats sends none: the slow commits look
// like a silent node and the lease ends although the cluster renews it.
func TestPlantedKeepAliveNoHeartbeatsLosesTheLease(t *testing.T) {
	st, ended := keepAliveThroughSlowCommits(t, func(c *Config) { c.Testing.PlantedBugs = []string{BugKeepAliveNoBeats} })
	if ended == nil {
		t.Fatalf("planted %s: the lease lived through the slow commits: not the defect; %+v", BugKeepAliveNoBeats, st)
	}
}
