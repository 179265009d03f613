package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasefence/leasefence/internal/bench/runner"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestValidateFillsDefaultsAndRefusesNonsense(t *testing.T) {
	c := Config{Endpoints: []string{"127.0.0.1:7001"}, Workloads: []string{"all"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Workloads) != len(Workloads) || c.Duration != 10*time.Second || c.TTL != 10*time.Second {
		t.Fatalf("defaults not applied: %+v", c)
	}
	for name, bad := range map[string]Config{
		"no target":        {},
		"unknown workload": {Endpoints: []string{"127.0.0.1:1"}, Workloads: []string{"nope"}},
		"zero clients":     {Endpoints: []string{"127.0.0.1:1"}, Concurrency: []int{0}},
		"remote endpoint":  {Endpoints: []string{"192.0.2.1:7001"}},
		"interval >= ttl":  {Endpoints: []string{"127.0.0.1:1"}, TTL: time.Second, KeepAliveInterval: time.Second},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Every workload runs briefly against a three-node cluster started in this
// process, and reports something sensible.
func TestEveryWorkloadRunsAgainstALocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := Config{
		Workloads: []string{"all"}, Concurrency: []int{4}, LocalCluster: 3,
		Duration: 400 * time.Millisecond, Warmup: 100 * time.Millisecond,
		TTL: 5 * time.Second, Resources: 2, Leases: 50, KeepAliveInterval: 100 * time.Millisecond,
		JSON: true, Out: &out,
	}
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rs, err := runner.ReadJSON(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(Workloads) {
		t.Fatalf("%d results, want %d", len(rs), len(Workloads))
	}
	for _, r := range rs {
		b, _ := json.Marshal(r)
		if r.Ops == 0 || r.Errors != 0 {
			t.Errorf("%s: %s", r.Workload, b)
		}
		switch r.Workload {
		case Contended:
			if r.Refused == 0 {
				t.Errorf("contended: no refusals counted: %s", b)
			}
		case Renew:
			if r.Extra["leases_live_at_end"] != 50 {
				t.Errorf("renew lost leases: %s", b)
			}
		case Mixed:
			if len(r.Kinds) != 3 {
				t.Errorf("mixed: kinds %s", b)
			}
		}
	}
}
