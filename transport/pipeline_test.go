package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// echoConsumer answers every AppendEntries on tr's Consumer with
// LastLog = PrevLogEntry, after gate is closed (nil: at once). Requests
// whose PrevLogEntry is in failOn are answered with a remote error.
func echoConsumer(t *testing.T, tr *Transport, gate <-chan struct{}, failOn map[uint64]bool) {
	go func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				if gate != nil {
					select {
					case <-gate:
					case <-t.Context().Done():
						return
					}
				}
				req := rpc.Command.(*raft.AppendEntriesRequest)
				resp := &raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry, Success: true}
				var err error
				if failOn[req.PrevLogEntry] {
					err = fmt.Errorf("refused %d", req.PrevLogEntry)
				}
				rpc.Respond(resp, err)
			case <-t.Context().Done():
				return
			}
		}
	}()
}

func TestPipelineKeepsManyRequestsInFlightAndDeliversResponsesInOrder(t *testing.T) {
	const inFlight = 16
	a := startNode(t, "127.0.0.1:0", func(c *Config) { c.MaxPipelineInFlight = inFlight })
	b := startNode(t, "127.0.0.1:0", nil)

	gate := make(chan struct{})
	failOn := map[uint64]bool{inFlight + 50: true, inFlight + 51: true}
	echoConsumer(t, b.tr, gate, failOn)

	p, err := a.tr.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatalf("AppendEntriesPipeline: %v", err)
	}
	defer p.Close()

	newReq := func(i uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{
			Term: 3, PrevLogEntry: i, PrevLogTerm: 3, LeaderCommitIndex: i,
			Entries: []*raft.Log{{Index: i + 1, Term: 3, Data: []byte(fmt.Sprint(i))}},
		}
	}

	// Phase 1: the remote raft holds back its answers, yet every request up
	// to the in-flight limit is accepted: they are all in flight at once.
	var sent []*raft.AppendEntriesRequest
	for i := range uint64(inFlight) {
		req := newReq(i)
		if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatalf("AppendEntries %d: %v", i, err)
		}
		sent = append(sent, req)
	}
	select {
	case f := <-p.Consumer():
		t.Fatalf("future for %d completed before the remote answered", f.Request().PrevLogEntry)
	default:
	}
	close(gate)

	// Phase 2: many more requests stream through while responses are
	// consumed; the sender blocks whenever inFlight are outstanding.
	const total = 1000
	sendErr := make(chan error, 1)
	go func() {
		for i := uint64(inFlight); i < total; i++ {
			if _, err := p.AppendEntries(newReq(i), new(raft.AppendEntriesResponse)); err != nil {
				sendErr <- fmt.Errorf("AppendEntries %d: %w", i, err)
				return
			}
		}
		sendErr <- nil
	}()

	timeout := time.After(30 * time.Second)
	for i := range uint64(total) {
		var f raft.AppendFuture
		select {
		case f = <-p.Consumer():
		case <-timeout:
			t.Fatalf("timed out waiting for response %d", i)
		}
		if got := f.Request().PrevLogEntry; got != i {
			t.Fatalf("future %d carries request %d: out of order", i, got)
		}
		if i < inFlight && f.Request() != sent[i] {
			t.Fatalf("future %d does not carry the request that was sent", i)
		}
		err := f.Error()
		if failOn[i] {
			var remote *RemoteError
			if !errors.As(err, &remote) {
				t.Fatalf("future %d: error = %v, want a *RemoteError", i, err)
			}
		} else if err != nil {
			t.Fatalf("future %d: %v", i, err)
		}
		if resp := f.Response(); resp.LastLog != i || !resp.Success || resp.Term != 3 {
			t.Fatalf("future %d: response %+v", i, resp)
		}
		if f.Start().IsZero() {
			t.Fatalf("future %d: zero start time", i)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.AppendEntries(newReq(total), new(raft.AppendEntriesResponse)); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("AppendEntries after Close: error = %v, want raft.ErrPipelineShutdown", err)
	}
}

func TestPipelineFailsOutstandingFuturesInOrderWhenThePeerGoesAway(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", func(c *Config) { c.MaxPipelineInFlight = 8 })
	b := startNode(t, "127.0.0.1:0", nil)

	// The remote raft takes the first request and never answers.
	taken := make(chan struct{})
	go func() {
		select {
		case <-b.tr.Consumer():
			close(taken)
		case <-t.Context().Done():
		}
	}()
	p, err := a.tr.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatalf("AppendEntriesPipeline: %v", err)
	}
	defer p.Close()
	for i := range uint64(3) {
		if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: i}, new(raft.AppendEntriesResponse)); err != nil {
			t.Fatalf("AppendEntries %d: %v", i, err)
		}
	}
	<-taken
	b.stop()

	for i := range uint64(3) {
		select {
		case f := <-p.Consumer():
			if got := f.Request().PrevLogEntry; got != i {
				t.Fatalf("future %d carries request %d", i, got)
			}
			if f.Error() == nil {
				t.Fatalf("future %d succeeded after the peer went away", i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("future %d never completed", i)
		}
	}
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err == nil {
		t.Fatal("AppendEntries succeeded on a failed pipeline")
	}
}

func TestPipelinedRequestTimesOutWithoutAResponse(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", func(c *Config) { c.Timeout = 200 * time.Millisecond })
	b := startNode(t, "127.0.0.1:0", nil)
	go func() { // take the request, never answer
		select {
		case <-b.tr.Consumer():
		case <-t.Context().Done():
		}
	}()

	p, err := a.tr.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatalf("AppendEntriesPipeline: %v", err)
	}
	defer p.Close()
	f, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse))
	if err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
	select {
	case done := <-p.Consumer():
		if done != f {
			t.Fatal("a different future completed")
		}
		if err := f.Error(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the future never timed out")
	}
}

func TestPipelineOfDepthOneIsNotSupported(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", func(c *Config) { c.MaxPipelineInFlight = 1 })
	if _, err := a.tr.AppendEntriesPipeline("b", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("error = %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

func TestTransportCloseClosesOpenPipelines(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", func(c *Config) { c.MaxPipelineInFlight = 4 })
	b := startNode(t, "127.0.0.1:0", nil)
	echoConsumer(t, b.tr, nil, nil)

	p, err := a.tr.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatalf("AppendEntriesPipeline: %v", err)
	}
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
	_ = a.tr.Close()
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("AppendEntries after transport Close: error = %v, want raft.ErrPipelineShutdown", err)
	}
	_ = p.Close() // still safe
}
