package election_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/client"
	"github.com/leasefence/leasefence/client/election"
	"github.com/leasefence/leasefence/internal/testcluster"
)

var leasedBin string

func TestMain(m *testing.M) {
	testcluster.Main(m, &leasedBin, &endpoint, nil)
}

// stallable drops every keep-alive message while stalled is set, as a
// network that swallows one client's packets would.
type stallable struct {
	grpc.ClientStream
	stalled *atomic.Bool
}

func (s stallable) SendMsg(m any) error {
	if s.stalled.Load() {
		return nil
	}
	return s.ClientStream.SendMsg(m)
}

func stallInterceptor(stalled *atomic.Bool) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/leasefence.v1.LeaseService/KeepAlive" {
			return cs, err
		}
		return stallable{cs, stalled}, nil
	}
}

type term struct {
	who   string
	token uint64
	ctx   context.Context
}

// Two candidates: one leads; its keep-alive stalls (as a frozen process's
// would); the other takes over with a higher token, and by then the old
// leader's context is already done.
func TestStalledLeaderIsReplacedWithHigherTokenAfterItsContextEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real leased processes")
	}
	c := testcluster.Start(t, leasedBin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	terms := make(chan term, 4)
	var clients []*client.Client
	stalls := map[string]*atomic.Bool{"a": {}, "b": {}}
	for _, who := range []string{"a", "b"} {
		cl, err := client.New(client.Config{
			Endpoints:   c.Endpoints(),
			DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(stallInterceptor(stalls[who]))},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
		e := election.New(cl, "leader/scheduler", who, election.WithTTL(2*time.Second))
		go e.Run(ctx, election.Callbacks{
			OnStartedLeading: func(lctx context.Context, token uint64) { terms <- term{who, token, lctx} },
		})
	}
	first := <-terms
	obs := election.New(clients[0], "leader/scheduler", "observer")
	if l, err := obs.Leader(ctx); err != nil || l.Identity != first.who || l.Token != first.token {
		t.Fatalf("observed leader %+v (%v), want %s/%d", l, err, first.who, first.token)
	}
	stalls[first.who].Store(true)
	second := <-terms
	if second.who == first.who {
		t.Fatalf("%s led twice in a row", first.who)
	}
	if second.token <= first.token {
		t.Fatalf("new leader's token %d not above %d", second.token, first.token)
	}
	if first.ctx.Err() == nil {
		t.Fatal("the old leader's context was still live when the new leader started")
	}
	if second.ctx.Err() != nil {
		t.Fatal("new leader's context already done")
	}
}

func TestObserveReportsEachLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real leased processes")
	}
	c := testcluster.Start(t, leasedBin, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(client.Config{Endpoints: c.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	watch := election.New(cl, "leader/obs", "watcher").Observe(ctx)
	if l := <-watch; l.Identity != "" {
		t.Fatalf("initial leader %+v, want none", l)
	}
	e := election.New(cl, "leader/obs", "me")
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-watch; got.Identity != "me" || got.Token != l.Token() {
		t.Fatalf("observed %+v", got)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for got := range watch {
		if got.Identity == "" {
			return
		}
	}
	t.Fatal("resignation never observed")
}

// delayFirstRenewReply holds back the answer to the first unary Renew (the
// one a waiting Acquire confirms its grant with) for d.
func delayFirstRenewReply(d time.Duration, n *atomic.Int32) grpc.UnaryClientInterceptor {
	return testcluster.DelayReply(d, func(m string) bool {
		return m == "/leasefence.v1.LeaseService/Renew" && n.Add(1) == 1
	})
}

// A campaign whose grant is confirmed only after its safe window closed
// gets no leadership from it (Acquire released that lease) and campaigns
// again with a new request id, rather than giving up or replaying the
// released lease.
func TestCampaignAfterLateGrantCampaignsAgain(t *testing.T) {
	var renews atomic.Int32
	cl, err := client.New(client.Config{
		Endpoints:   []string{endpoint},
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(delayFirstRenewReply(2*time.Second, &renews))},
		// Long enough to hear the late answer (the default per-attempt
		// bound, 1.2 s, would cut it and replay the grant in time).
		RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := election.New(cl, "leader/late", "a", election.WithTTL(2*time.Second))
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatalf("campaign after a late grant: %v", err)
	}
	defer e.Resign(ctx)
	if renews.Load() < 2 {
		t.Fatalf("the late grant was not exercised (%d renewals)", renews.Load())
	}
	if l.Token() < 2 || l.Err() != nil {
		t.Fatalf("leadership token %d (err %v), want a fresh lease after the abandoned one", l.Token(), l.Err())
	}
}
