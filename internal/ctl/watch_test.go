package ctl

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/api"
)

func event(index uint64, seq uint32, typ api.EventType, reason string) *api.WatchEvent {
	return &api.WatchEvent{
		Position: &api.Position{Index: index, Seq: seq},
		Type:     typ,
		Lease:    testLease("jobs/42"),
		Reason:   reason,
		NowNs:    int64(index) * 1e9,
	}
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchRun is a leasectl run in the background.
type watchRun struct {
	cancel         context.CancelFunc
	stdout, stderr *syncBuffer
	done           chan int
}

func startRun(args ...string) *watchRun {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchRun{cancel: cancel, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan int, 1)}
	go func() { w.done <- newTestApp(w.stdout, w.stderr).run(ctx, args) }()
	return w
}

// interrupt cancels the run, as SIGINT would, and returns its exit status.
func (w *watchRun) interrupt() int {
	w.cancel()
	return <-w.done
}

func (w *watchRun) lines() []string {
	return strings.Split(strings.TrimSuffix(w.stdout.String(), "\n"), "\n")
}

func watchRequests(f *fake) []*api.WatchRequest {
	var out []*api.WatchRequest
	for _, m := range f.requests("Watch") {
		out = append(out, m.(*api.WatchRequest))
	}
	return out
}

// blockUntilDone keeps a stream open until the client goes away.
func blockUntilDone(_ *api.WatchRequest, s grpc.ServerStreamingServer[api.WatchEvent]) error {
	<-s.Context().Done()
	return nil
}

func TestWatchResumesAfterTheLastPositionAcrossAReconnect(t *testing.T) {
	t.Parallel()
	first := start(t, &fake{
		onGet: func(context.Context, *api.GetRequest) (*api.GetResponse, error) {
			return &api.GetResponse{AppliedIndex: 5}, nil
		},
		onWatch: func(_ *api.WatchRequest, s grpc.ServerStreamingServer[api.WatchEvent]) error {
			s.Send(event(6, 0, api.EventType_EVENT_TYPE_GRANTED, "acquire"))
			s.Send(event(6, 1, api.EventType_EVENT_TYPE_RELEASED, "release"))
			return status.Error(codes.Unavailable, "node shutting down")
		},
	})
	second := start(t, &fake{onWatch: func(r *api.WatchRequest, s grpc.ServerStreamingServer[api.WatchEvent]) error {
		// A server that resends an event already delivered must not make
		// the watch print it twice.
		s.Send(event(6, 1, api.EventType_EVENT_TYPE_RELEASED, "release"))
		s.Send(event(7, 0, api.EventType_EVENT_TYPE_GRANTED, "acquire"))
		return blockUntilDone(r, s)
	}})

	w := startRun("watch", "jobs/", "--prefix", "--endpoints", first.addr+","+second.addr)
	waitFor(t, "three events", func() bool { return strings.Count(w.stdout.String(), "\n") >= 3 })
	if code := w.interrupt(); code != ExitOK {
		t.Errorf("exit %d after interrupt, want 0; stderr %q", code, w.stderr.String())
	}

	lines := w.lines()
	want := []string{
		"6.0 granted jobs/42 token=7 holder=worker-a ttl=10s lease=" + testLeaseB64 + " reason=acquire",
		"6.1 released jobs/42 token=7 holder=worker-a ttl=10s lease=" + testLeaseB64 + " reason=release",
		"7.0 granted jobs/42 token=7 holder=worker-a ttl=10s lease=" + testLeaseB64 + " reason=acquire",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	r1, r2 := watchRequests(first), watchRequests(second)
	if len(r1) != 1 || len(r2) != 1 {
		t.Fatalf("watch requests: first %d, second %d", len(r1), len(r2))
	}
	if !proto.Equal(r1[0], &api.WatchRequest{Key: "jobs/", Prefix: true, After: &api.Position{Index: 5, Seq: math.MaxUint32}}) {
		t.Errorf("first request %v: want to start after applied index 5", r1[0])
	}
	if !proto.Equal(r2[0], &api.WatchRequest{Key: "jobs/", Prefix: true, After: &api.Position{Index: 6, Seq: 1}}) {
		t.Errorf("second request %v: want to resume after 6.1", r2[0])
	}
	if !strings.Contains(w.stderr.String(), "resuming after 6.1 on "+second.addr) {
		t.Errorf("stderr %q does not report the reconnect", w.stderr.String())
	}
}

func TestWatchThatBreaksBeforeAnyEventResumesFromItsStart(t *testing.T) {
	t.Parallel()
	first := start(t, &fake{
		onGet: func(context.Context, *api.GetRequest) (*api.GetResponse, error) {
			return &api.GetResponse{AppliedIndex: 41}, nil
		},
		onWatch: func(*api.WatchRequest, grpc.ServerStreamingServer[api.WatchEvent]) error {
			return nil // the server ends the stream: treated as a failure
		},
	})
	second := start(t, &fake{onWatch: blockUntilDone})
	w := startRun("watch", "jobs/42", "--endpoints", first.addr+","+second.addr)
	waitFor(t, "the second stream", func() bool { return len(watchRequests(second)) == 1 })
	if code := w.interrupt(); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	want := &api.Position{Index: 41, Seq: math.MaxUint32}
	if got := watchRequests(second)[0].GetAfter(); !proto.Equal(got, want) {
		t.Errorf("resumed after %v, want %v", got, want)
	}
}

func TestWatchAfterFlagAndJSON(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onWatch: func(r *api.WatchRequest, s grpc.ServerStreamingServer[api.WatchEvent]) error {
		s.Send(event(12, 4, api.EventType_EVENT_TYPE_EXPIRED, "expire"))
		return blockUntilDone(r, s)
	}})
	w := startRun("watch", "jobs/42", "--after", "12.3", "--json", "--endpoints", f.addr)
	waitFor(t, "one event", func() bool { return strings.Contains(w.stdout.String(), "\n") })
	if code := w.interrupt(); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	if n := len(f.requests("Get")); n != 0 {
		t.Errorf("--after should skip the baseline Get; got %d", n)
	}
	if got := watchRequests(f)[0].GetAfter(); !proto.Equal(got, &api.Position{Index: 12, Seq: 3}) {
		t.Errorf("after = %v", got)
	}
	var ev eventView
	if err := json.Unmarshal([]byte(w.lines()[0]), &ev); err != nil {
		t.Fatalf("line %q: %v", w.lines()[0], err)
	}
	if ev.Position != "12.4" || ev.Index != 12 || ev.Seq != 4 || ev.Type != "expired" || ev.Reason != "expire" ||
		ev.Resource != "jobs/42" || ev.Lease == nil || ev.Lease.ID != testLeaseB64 {
		t.Errorf("event JSON = %+v", ev)
	}
}

func TestWatchFollowsNotLeader(t *testing.T) {
	t.Parallel()
	leader := start(t, &fake{onWatch: blockUntilDone})
	follower := start(t, &fake{})
	follower.onWatch = func(*api.WatchRequest, grpc.ServerStreamingServer[api.WatchEvent]) error {
		return notLeader(t, leader.addr)
	}
	bystander := start(t, &fake{onWatch: blockUntilDone})
	w := startRun("watch", "jobs/42", "--after", "1.0", "--endpoints", follower.addr+","+bystander.addr)
	waitFor(t, "the leader's stream", func() bool { return len(watchRequests(leader)) == 1 })
	if code := w.interrupt(); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	if n := bystander.callCount(); n != 0 {
		t.Errorf("bystander got %d calls", n)
	}
}

func TestWatchEndsWithZeroAtAnExplicitTimeout(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{onWatch: blockUntilDone})
	res := runCtl(t, "watch", "jobs/42", "--after", "1.0", "--timeout", "150ms", "--endpoints", f.addr)
	if res.code != ExitOK {
		t.Errorf("exit %d: %s", res.code, res.stderr)
	}
}

func TestWatchFailures(t *testing.T) {
	t.Parallel()
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		res := runCtl(t, "watch", "jobs/42", "--endpoints", deadAddr(t)+","+deadAddr(t))
		if res.code != ExitFailed || !strings.Contains(res.stderr, "cluster unreachable") {
			t.Errorf("exit %d, stderr %q", res.code, res.stderr)
		}
	})
	t.Run("invalid argument is not retried", func(t *testing.T) {
		t.Parallel()
		f := start(t, &fake{onWatch: func(*api.WatchRequest, grpc.ServerStreamingServer[api.WatchEvent]) error {
			return status.Error(codes.InvalidArgument, "bad key")
		}})
		res := runCtl(t, "watch", "", "--prefix", "--after", "1.0", "--endpoints", f.addr)
		if res.code != ExitFailed || len(watchRequests(f)) != 1 || !strings.Contains(res.stderr, "bad key") {
			t.Errorf("exit %d, %d requests, stderr %q", res.code, len(watchRequests(f)), res.stderr)
		}
	})
}

func TestWatchPrintsAHeaderSayingWhatFromWhereAndHowToStop(t *testing.T) {
	t.Parallel()
	f := start(t, &fake{
		onGet: func(context.Context, *api.GetRequest) (*api.GetResponse, error) {
			return &api.GetResponse{AppliedIndex: 5}, nil
		},
		onWatch: blockUntilDone,
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "jobs/", "--prefix"}, "leasectl: watching every resource under jobs/ after 5.4294967295 on " + f.addr + "; Ctrl-C to stop\n"},
		{[]string{"watch", "jobs/42", "--after", "12.3"}, "leasectl: watching jobs/42 after 12.3 on " + f.addr + "; Ctrl-C to stop\n"},
	} {
		w := startRun(append(c.args, "--endpoints", f.addr)...)
		waitFor(t, "the header", func() bool { return strings.Contains(w.stderr.String(), "\n") })
		if code := w.interrupt(); code != ExitOK || w.stderr.String() != c.want || w.stdout.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want stderr %q", c.args, code, w.stdout.String(), w.stderr.String(), c.want)
		}
	}
}
