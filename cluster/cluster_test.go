package cluster

import (
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
)

func acquireReq(resource string, ttl time.Duration) *api.AcquireRequest {
	return &api.AcquireRequest{Resource: resource, Holder: "tester", Ttl: durationpb.New(ttl)}
}

func heldDetail(t *testing.T, err error) *api.ResourceHeld {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("want FailedPrecondition, got %v", err)
	}
	for _, d := range st.Details() {
		if h, ok := d.(*api.ResourceHeld); ok {
			return h
		}
	}
	t.Fatalf("no ResourceHeld detail in %v", err)
	return nil
}

func TestAcquireHeldReleaseAcquireOnThreeNodes(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	c := tc.client(0)
	ctx := ctxT(t)
	r1, err := c.Acquire(ctx, acquireReq("jobs/1", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Lease.Token != 1 || len(r1.Lease.Id) != 16 {
		t.Fatalf("first grant: %+v", r1.Lease)
	}
	_, err = c.Acquire(ctx, acquireReq("jobs/1", 10*time.Second))
	h := heldDetail(t, err)
	if h.Token != 1 || h.Holder != "tester" || h.TimeLeft.AsDuration() <= 0 || h.TimeLeft.AsDuration() > 10*time.Second+tc.cfgs[0].SkewMargin {
		t.Fatalf("held detail: %+v", h)
	}
	rel, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: r1.Lease.Id})
	if err != nil || !rel.Released {
		t.Fatalf("release: %v %v", rel, err)
	}
	r2, err := c.Acquire(ctx, acquireReq("jobs/1", 10*time.Second))
	if err != nil || r2.Lease.Token != 2 {
		t.Fatalf("second grant: %v %v", r2, err)
	}
}

func TestRenewKeepsTokenAndRenewAfterExpiryGetsHigherToken(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	c := tc.client(1)
	ctx := ctxT(t)
	r1, err := c.Acquire(ctx, acquireReq("r", 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rn, err := c.Renew(ctx, &api.RenewRequest{LeaseId: r1.Lease.Id})
	if err != nil || rn.Lease.Token != r1.Lease.Token || rn.Lease.ExpiresAtNs < r1.Lease.ExpiresAtNs {
		t.Fatalf("renew: %v %v", rn, err)
	}
	// Poll (reading, not renewing) until the lease is past its expiry in
	// cluster time; then a renew is refused.
	eventually(t, 10*time.Second, "lease past expiry", func() bool {
		g, err := c.Get(ctx, &api.GetRequest{Resource: "r"})
		return err == nil && g.Lease == nil
	})
	if _, err := c.Renew(ctx, &api.RenewRequest{LeaseId: r1.Lease.Id}); status.Code(err) != codes.NotFound {
		t.Fatalf("renew after expiry: want NotFound, got %v", err)
	}
	// The same holder acquires again and gets a higher token (polling past
	// the skew margin).
	var r2 *api.AcquireResponse
	eventually(t, 10*time.Second, "re-acquire after expiry", func() bool {
		r2, err = c.Acquire(ctx, acquireReq("r", 1500*time.Millisecond))
		return err == nil
	})
	if r2.Lease.Token <= r1.Lease.Token {
		t.Fatalf("token after expiry %d not above %d", r2.Lease.Token, r1.Lease.Token)
	}
}

func TestWriteToFollowerIsForwardedAndReadIsLinearizableEverywhere(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	fi, _ := tc.follower()
	ctx := ctxT(t)
	for round := 0; round < 5; round++ {
		r, err := tc.client(fi).Acquire(ctx, acquireReq("fwd", 10*time.Second))
		if err != nil {
			t.Fatalf("acquire through follower: %v", err)
		}
		// Right after the grant, every node's linearizable read sees it.
		for i := range tc.nodes {
			g, err := tc.client(i).Get(ctx, &api.GetRequest{Resource: "fwd"})
			if err != nil {
				t.Fatalf("get from n%d: %v", i+1, err)
			}
			if g.Lease == nil || g.Lease.Token != r.Lease.Token {
				t.Fatalf("n%d read %v after grant of token %d", i+1, g.Lease, r.Lease.Token)
			}
		}
		if _, err := tc.client(fi).Release(ctx, &api.ReleaseRequest{LeaseId: r.Lease.Id}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInputGetsDocumentedCodeAndChangesNothing(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	c := tc.client(0)
	ctx := ctxT(t)
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'x'
	}
	cases := []struct {
		name  string
		req   *api.AcquireRequest
		field string
	}{
		{"empty resource", acquireReq("", 10*time.Second), "resource"},
		{"oversized resource", acquireReq(string(long), 10*time.Second), "resource"},
		{"control character", acquireReq("a\x01b", 10*time.Second), "resource"},
		{"missing ttl", &api.AcquireRequest{Resource: "r"}, "ttl"},
		{"ttl below min", acquireReq("r", 100*time.Millisecond), "ttl"},
		{"ttl above max", acquireReq("r", time.Hour), "ttl"},
		{"negative ttl", acquireReq("r", -time.Second), "ttl"},
		{"bad scope", &api.AcquireRequest{Resource: "r", Scope: "s\n", Ttl: durationpb.New(10 * time.Second)}, "scope"},
		{"oversized holder", &api.AcquireRequest{Resource: "r", Holder: string(long), Ttl: durationpb.New(10 * time.Second)}, "holder"},
	}
	before, _ := tc.nodes[0].admin.Status(ctx, &api.StatusRequest{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Acquire(ctx, tc.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("want InvalidArgument, got %v", err)
			}
			var bf *api.BadField
			for _, d := range st.Details() {
				if b, ok := d.(*api.BadField); ok {
					bf = b
				}
			}
			if bf == nil || bf.Field != tc.field {
				t.Fatalf("want BadField %q, got %v", tc.field, st.Details())
			}
		})
	}
	for _, id := range [][]byte{nil, {1, 2, 3}, make([]byte, 17)} {
		if _, err := c.Renew(ctx, &api.RenewRequest{LeaseId: id}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("renew with %d-byte id: %v", len(id), err)
		}
		if _, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: id}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("release with %d-byte id: %v", len(id), err)
		}
	}
	unknown := make([]byte, 16)
	unknown[0] = 42
	if _, err := c.Renew(ctx, &api.RenewRequest{LeaseId: unknown}); status.Code(err) != codes.NotFound {
		t.Fatalf("renew unknown: %v", err)
	}
	if r, err := c.Release(ctx, &api.ReleaseRequest{LeaseId: unknown}); err != nil || r.Released {
		t.Fatalf("release unknown: %v %v", r, err)
	}
	if _, err := c.Get(ctx, &api.GetRequest{Resource: ""}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("get empty: %v", err)
	}
	after, _ := tc.nodes[0].admin.Status(ctx, &api.StatusRequest{})
	if after.LiveLeases != before.LiveLeases || after.LiveLeases != 0 {
		t.Fatalf("bad input changed state: %d -> %d leases", before.LiveLeases, after.LiveLeases)
	}
}

func TestNodeJoinsRunningClusterAndIsRemoved(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	addr := freeAddrs(t, 1)[0]
	cfg := tc.cfgs[0]
	cfg.ID, cfg.Listen, cfg.DataDir, cfg.Bootstrap, cfg.Join = "n4", addr, t.TempDir(), nil, tc.cfgs[1].Listen
	cfg.Clock, cfg.Logger = NewManualClock(), testLogger(t, "n4")
	n4, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	eventually(t, 15*time.Second, "n4 is a member and knows the leader", func() bool {
		st, err := n4.admin.Status(ctx, &api.StatusRequest{})
		return err == nil && len(st.Members) == 4 && st.LeaderId != ""
	})
	r, err := n4.leases.Acquire(ctx, acquireReq("via-n4", 10*time.Second))
	if err != nil || r.Lease.Token != 1 {
		t.Fatalf("acquire through the new member: %v %v", r, err)
	}
	_, leader := tc.leader()
	if _, err := leader.admin.Remove(ctx, &api.RemoveRequest{Id: "n4"}); err != nil {
		t.Fatal(err)
	}
	st, err := leader.admin.Status(ctx, &api.StatusRequest{})
	if err != nil || len(st.Members) != 3 {
		t.Fatalf("after remove: %v %v", st, err)
	}
	if _, err := leader.admin.Remove(ctx, &api.RemoveRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("remove unknown: %v", err)
	}
}

func TestRemoveIsRefusedWhenTheRestCouldNotFormAQuorum(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	li, leader := tc.leader()
	down := (li + 1) % 3
	live := (li + 2) % 3
	tc.stop(down)
	// Removing the live follower would leave the leader and a dead node.
	_, err := leader.admin.Remove(ctx, &api.RemoveRequest{Id: tc.cfgs[live].ID})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("remove of a live voter with another down: %v", err)
	}
	// Removing the dead one leaves two live voters: allowed.
	if _, err := leader.admin.Remove(ctx, &api.RemoveRequest{Id: tc.cfgs[down].ID}); err != nil {
		t.Fatalf("remove of the dead voter: %v", err)
	}
}

func TestMetricsAndHealthAreServed(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.MetricsListen = "127.0.0.1:0" })
	ctx := ctxT(t)
	if _, err := tc.client(0).Acquire(ctx, acquireReq("m", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_, leader := tc.leader()
	get := func(path string) (int, string) {
		resp, err := testHTTP.Get("http://" + leader.MetricsAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	for _, want := range []string{"leasefence_grants_total 1", "leasefence_leases_live 1", "leasefence_leader 1", `leasefence_raft_state{state="Leader"} 1`, "leasefence_propose_seconds_count"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q (status %d)", want, code)
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := get("/debug/pprof/"); code != 404 {
		t.Fatalf("pprof served without the flag: %d", code)
	}
	conn, err := grpc.NewClient(tc.cfgs[0].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eventually(t, 5*time.Second, "grpc health SERVING", func() bool {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "leasefence.v1.LeaseService"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
}

// The unsafe surface exists only by explicit setting, and Status says so.
func TestUnsafeFeaturesNeedTheirFlagAndAreReported(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.MetricsListen = "127.0.0.1:0"
		if c.ID == "n1" {
			c.Pprof = true
		}
		if c.ID == "n2" {
			c.Unsafe.PeerRoutes = map[string]string{"127.0.0.1:1": "127.0.0.1:2"} // no member: harmless
		}
	})
	ctx := ctxT(t)
	for i, n := range tc.nodes {
		want := "insecure"
		if i == 0 {
			want = "insecure,pprof"
		}
		if i == 1 {
			want = "insecure,peer-route"
		}
		if got := reportedUnsafe(ctx, t, n); got != want {
			t.Fatalf("%s reports unsafe %q, want %q", n.ID(), got, want)
		}
		resp, err := testHTTP.Get("http://" + n.MetricsAddr() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if wantCode := map[bool]int{true: 200, false: 404}[i == 0]; resp.StatusCode != wantCode {
			t.Fatalf("%s pprof status %d, want %d", n.ID(), resp.StatusCode, wantCode)
		}
	}
}
