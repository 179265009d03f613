package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// received is what a test consumer saw of one RPC.
type received struct {
	command any
	data    []byte // InstallSnapshot only
	readErr error  // InstallSnapshot only
}

// answerOne serves one RPC from tr's Consumer: it reads the snapshot data
// if any, responds with resp and err, and reports what it saw.
func answerOne(t *testing.T, tr *Transport, resp any, err error) <-chan received {
	ch := make(chan received, 1)
	go func() {
		select {
		case rpc := <-tr.Consumer():
			r := received{command: rpc.Command}
			if rpc.Reader != nil {
				r.data, r.readErr = io.ReadAll(rpc.Reader)
			}
			rpc.Respond(resp, err)
			ch <- r
		case <-t.Context().Done():
			close(ch)
		}
	}()
	return ch
}

// call issues req from tr to target through the method that matches req's
// type and returns the response it filled in.
func call(tr *Transport, target raft.ServerAddress, req any, data []byte) (any, error) {
	switch req := req.(type) {
	case *raft.AppendEntriesRequest:
		var out raft.AppendEntriesResponse
		err := tr.AppendEntries("b", target, req, &out)
		return &out, err
	case *raft.RequestVoteRequest:
		var out raft.RequestVoteResponse
		err := tr.RequestVote("b", target, req, &out)
		return &out, err
	case *raft.RequestPreVoteRequest:
		var out raft.RequestPreVoteResponse
		err := tr.RequestPreVote("b", target, req, &out)
		return &out, err
	case *raft.InstallSnapshotRequest:
		var out raft.InstallSnapshotResponse
		err := tr.InstallSnapshot("b", target, req, &out, bytes.NewReader(data))
		return &out, err
	case *raft.TimeoutNowRequest:
		var out raft.TimeoutNowResponse
		err := tr.TimeoutNow("b", target, req, &out)
		return &out, err
	default:
		panic("unknown request type")
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestEveryRPCFieldSurvivesTheRoundTrip(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", nil)
	b := startNode(t, "127.0.0.1:0", nil)

	reqHeader := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("node-a"), Addr: []byte("10.0.0.1:7001")}
	respHeader := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax - 1, ID: []byte("node-b"), Addr: []byte("10.0.0.2:7001")}
	at := time.Unix(1_700_000_000, 123_456_789).UTC()
	snapshot := randomBytes(3*DefaultSnapshotChunkSize+123, 1) // several chunks and a partial one

	cases := []struct {
		name      string
		req       any
		data      []byte // InstallSnapshot data
		resp      any    // what the remote raft answers
		remoteErr error  // what the remote raft answers
		wantResp  any    // what the caller gets; resp when nil
	}{
		{
			name: "append-entries every field",
			req: &raft.AppendEntriesRequest{
				RPCHeader: reqHeader, Term: 7, Leader: []byte("10.0.0.1:7001"),
				PrevLogEntry: 41, PrevLogTerm: 6, LeaderCommitIndex: 40,
				Entries: []*raft.Log{
					{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("set x"), Extensions: []byte("ext"), AppendedAt: at},
					{Index: 43, Term: 7, Type: raft.LogConfiguration, Data: []byte{0, 1, 2}, Extensions: []byte{9}, AppendedAt: at.Add(time.Nanosecond)},
					{Index: 44, Term: 7, Type: raft.LogType(255)},
					{},
				},
			},
			resp: &raft.AppendEntriesResponse{RPCHeader: respHeader, Term: 7, LastLog: 44, Success: true, NoRetryBackoff: true},
		},
		{
			name: "append-entries zero values",
			req:  &raft.AppendEntriesRequest{},
			resp: &raft.AppendEntriesResponse{},
		},
		{
			name: "append-entries heartbeat without a heartbeat handler",
			req:  &raft.AppendEntriesRequest{RPCHeader: reqHeader, Term: 3},
			resp: &raft.AppendEntriesResponse{RPCHeader: respHeader, Term: 3, Success: true},
		},
		{
			name:      "append-entries remote error with response",
			req:       &raft.AppendEntriesRequest{RPCHeader: reqHeader, Term: 2},
			resp:      &raft.AppendEntriesResponse{RPCHeader: respHeader, Term: 9},
			remoteErr: errors.New("stale term"),
		},
		{
			name:      "append-entries remote error without response",
			req:       &raft.AppendEntriesRequest{RPCHeader: reqHeader, Term: 2, PrevLogEntry: 1},
			remoteErr: errors.New("unexpected command"),
			wantResp:  &raft.AppendEntriesResponse{},
		},
		{
			name: "request-vote every field",
			req: &raft.RequestVoteRequest{
				RPCHeader: reqHeader, Term: 12, Candidate: []byte("10.0.0.1:7001"),
				LastLogIndex: 99, LastLogTerm: 11, LeadershipTransfer: true,
			},
			resp: &raft.RequestVoteResponse{RPCHeader: respHeader, Term: 12, Peers: []byte("legacy-peers"), Granted: true},
		},
		{
			name: "request-vote zero values",
			req:  &raft.RequestVoteRequest{},
			resp: &raft.RequestVoteResponse{},
		},
		{
			name:      "request-vote remote error",
			req:       &raft.RequestVoteRequest{RPCHeader: reqHeader, Term: 1},
			resp:      &raft.RequestVoteResponse{RPCHeader: respHeader, Term: 5},
			remoteErr: errors.New("unsupported protocol version"),
		},
		{
			name: "request-pre-vote every field",
			req: &raft.RequestPreVoteRequest{
				RPCHeader: reqHeader, Term: 13, LastLogIndex: 100, LastLogTerm: 12,
			},
			resp: &raft.RequestPreVoteResponse{RPCHeader: respHeader, Term: 12, Granted: true},
		},
		{
			name: "request-pre-vote zero values",
			req:  &raft.RequestPreVoteRequest{},
			resp: &raft.RequestPreVoteResponse{},
		},
		{
			name:      "request-pre-vote remote error",
			req:       &raft.RequestPreVoteRequest{RPCHeader: reqHeader, Term: 4},
			remoteErr: errors.New("pre-vote refused"),
			wantResp:  &raft.RequestPreVoteResponse{},
		},
		{
			name: "install-snapshot every field",
			req: &raft.InstallSnapshotRequest{
				RPCHeader: reqHeader, SnapshotVersion: raft.SnapshotVersionMax, Term: 8,
				Leader: []byte("10.0.0.1:7001"), LastLogIndex: 500, LastLogTerm: 8,
				Peers: []byte("legacy-peers"), Configuration: []byte("encoded-configuration"),
				ConfigurationIndex: 3, Size: int64(len(snapshot)),
			},
			data: snapshot,
			resp: &raft.InstallSnapshotResponse{RPCHeader: respHeader, Term: 8, Success: true},
		},
		{
			name: "install-snapshot zero values and no data",
			req:  &raft.InstallSnapshotRequest{},
			resp: &raft.InstallSnapshotResponse{},
		},
		{
			name:      "install-snapshot remote error",
			req:       &raft.InstallSnapshotRequest{RPCHeader: reqHeader, Term: 8, Size: 5},
			data:      []byte("hello"),
			resp:      &raft.InstallSnapshotResponse{RPCHeader: respHeader, Term: 8},
			remoteErr: errors.New("failed to restore snapshot"),
		},
		{
			name: "timeout-now every field",
			req:  &raft.TimeoutNowRequest{RPCHeader: reqHeader},
			resp: &raft.TimeoutNowResponse{RPCHeader: respHeader},
		},
		{
			name: "timeout-now zero values",
			req:  &raft.TimeoutNowRequest{},
			resp: &raft.TimeoutNowResponse{},
		},
		{
			name:      "timeout-now remote error",
			req:       &raft.TimeoutNowRequest{RPCHeader: reqHeader},
			remoteErr: errors.New("not a voter"),
			wantResp:  &raft.TimeoutNowResponse{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen := answerOne(t, b.tr, tc.resp, tc.remoteErr)
			got, err := call(a.tr, b.addr, tc.req, tc.data)

			if tc.remoteErr == nil {
				if err != nil {
					t.Fatalf("call: %v", err)
				}
			} else {
				var remote *RemoteError
				if !errors.As(err, &remote) {
					t.Fatalf("call error = %v, want a *RemoteError", err)
				}
				if remote.Message != tc.remoteErr.Error() {
					t.Fatalf("remote error message = %q, want %q", remote.Message, tc.remoteErr.Error())
				}
			}
			want := tc.wantResp
			if want == nil {
				want = tc.resp
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("response:\n got  %#v\n want %#v", got, want)
			}

			r, ok := <-seen
			if !ok {
				t.Fatal("the remote consumer saw no RPC")
			}
			if !reflect.DeepEqual(r.command, tc.req) {
				t.Errorf("request:\n got  %#v\n want %#v", r.command, tc.req)
			}
			if _, isSnap := tc.req.(*raft.InstallSnapshotRequest); isSnap {
				if r.readErr != nil {
					t.Errorf("reading snapshot data: %v", r.readErr)
				}
				if !bytes.Equal(r.data, tc.data) {
					t.Errorf("snapshot data: got %d bytes, want %d (equal=%v)", len(r.data), len(tc.data), bytes.Equal(r.data, tc.data))
				}
			}
		})
	}
}

func TestHeartbeatsTakeTheFastPathWhileAHandlerIsSet(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", nil)
	b := startNode(t, "127.0.0.1:0", nil)

	fast := make(chan raft.RPC, 1)
	b.tr.SetHeartbeatHandler(func(rpc raft.RPC) {
		fast <- rpc
		rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
	})

	heartbeat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(a.addr)}, Term: 5}
	var resp raft.AppendEntriesResponse
	if err := a.tr.AppendEntries("b", b.addr, heartbeat, &resp); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if !resp.Success || resp.Term != 5 {
		t.Fatalf("heartbeat response = %+v", resp)
	}
	select {
	case rpc := <-fast:
		if !reflect.DeepEqual(rpc.Command, heartbeat) {
			t.Fatalf("heartbeat handler got %#v", rpc.Command)
		}
	default:
		t.Fatal("heartbeat handler was not called")
	}

	// Anything more than a term and a leader goes to Consumer.
	notHeartbeat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(a.addr)}, Term: 5, LeaderCommitIndex: 1}
	seen := answerOne(t, b.tr, &raft.AppendEntriesResponse{Term: 5}, nil)
	if err := a.tr.AppendEntries("b", b.addr, notHeartbeat, &resp); err != nil {
		t.Fatalf("append entries: %v", err)
	}
	if r := <-seen; !reflect.DeepEqual(r.command, notHeartbeat) {
		t.Fatalf("consumer got %#v", r.command)
	}

	// Removing the handler sends heartbeats to Consumer again.
	b.tr.SetHeartbeatHandler(nil)
	seen = answerOne(t, b.tr, &raft.AppendEntriesResponse{Term: 5}, nil)
	if err := a.tr.AppendEntries("b", b.addr, heartbeat, &resp); err != nil {
		t.Fatalf("heartbeat without handler: %v", err)
	}
	if r := <-seen; !reflect.DeepEqual(r.command, heartbeat) {
		t.Fatalf("consumer got %#v", r.command)
	}
	if len(fast) != 0 {
		t.Fatal("heartbeat handler called after it was removed")
	}
}

func TestCallsAfterCloseReturnErrTransportShutdown(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", nil)
	b := startNode(t, "127.0.0.1:0", nil)

	// Open a connection first so Close has something to tear down.
	seen := answerOne(t, b.tr, &raft.TimeoutNowResponse{}, nil)
	if err := a.tr.TimeoutNow("b", b.addr, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}); err != nil {
		t.Fatalf("timeout-now before close: %v", err)
	}
	<-seen

	if err := a.tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	calls := map[string]func() error{
		"append-entries": func() error {
			return a.tr.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
		},
		"request-vote": func() error {
			return a.tr.RequestVote("b", b.addr, &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{})
		},
		"request-pre-vote": func() error {
			return a.tr.RequestPreVote("b", b.addr, &raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{})
		},
		"install-snapshot": func() error {
			return a.tr.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{Size: 1}, &raft.InstallSnapshotResponse{}, bytes.NewReader([]byte{1}))
		},
		"timeout-now": func() error {
			return a.tr.TimeoutNow("b", b.addr, &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
		},
		"append-entries-pipeline": func() error {
			_, err := a.tr.AppendEntriesPipeline("b", b.addr)
			return err
		},
		"new peer": func() error {
			return a.tr.TimeoutNow("c", "127.0.0.1:1", &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
		},
	}
	for name, fn := range calls {
		t.Run(name, func(t *testing.T) {
			if err := fn(); !errors.Is(err, raft.ErrTransportShutdown) {
				t.Fatalf("error = %v, want raft.ErrTransportShutdown", err)
			}
		})
	}
}

// unansweredVote starts nodes a and b and sends a RequestVote from a to b
// in the background; b's consumer takes it (taken receives it) and never
// answers. errCh receives the call's error.
func unansweredVote(t *testing.T) (a, b *testNode, taken <-chan raft.RPC, errCh <-chan error) {
	t.Helper()
	a = startNode(t, "127.0.0.1:0", nil)
	b = startNode(t, "127.0.0.1:0", nil)
	took := make(chan raft.RPC, 1)
	go func() {
		select {
		case rpc := <-b.tr.Consumer():
			took <- rpc
		case <-t.Context().Done():
		}
	}()
	errs := make(chan error, 1)
	go func() {
		errs <- a.tr.RequestVote("b", b.addr, &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
	}()
	return a, b, took, errs
}

func TestCloseCancelsInFlightCalls(t *testing.T) {
	a, _, taken, errCh := unansweredVote(t)
	select {
	case <-taken:
	case <-time.After(5 * time.Second):
		t.Fatal("the RPC never reached the remote consumer")
	}
	start := time.Now()
	_ = a.tr.Close()
	select {
	case err := <-errCh:
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Fatalf("error = %v, want raft.ErrTransportShutdown", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("call returned %v after Close", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight call did not return after Close")
	}
}

func TestClosedServerRespondsUnavailableAndHandsNothingToRaft(t *testing.T) {
	// An RPC waiting for b's raft when b closes is answered Unavailable.
	a, b, taken, errCh := unansweredVote(t)
	<-taken
	_ = b.tr.Close() // the gRPC server keeps serving
	if err := <-errCh; status.Code(err) != codes.Unavailable {
		t.Fatalf("in-flight call error = %v, want Unavailable", err)
	}

	// New RPCs are refused without reaching Consumer.
	for name, fn := range map[string]func() error{
		"append-entries": func() error {
			return a.tr.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1}, &raft.AppendEntriesResponse{})
		},
		"heartbeat": func() error {
			return a.tr.AppendEntries("b", b.addr, &raft.AppendEntriesRequest{Term: 1, Leader: []byte("x")}, &raft.AppendEntriesResponse{})
		},
		"install-snapshot": func() error {
			return a.tr.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{Size: 3}, &raft.InstallSnapshotResponse{}, bytes.NewReader([]byte("abc")))
		},
		"pipeline": func() error {
			p, err := a.tr.AppendEntriesPipeline("b", b.addr)
			if err != nil {
				return err
			}
			defer p.Close()
			f, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, &raft.AppendEntriesResponse{})
			if err != nil {
				return err
			}
			return f.Error()
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := fn(); status.Code(err) != codes.Unavailable {
				t.Fatalf("error = %v, want Unavailable", err)
			}
		})
	}
	select {
	case rpc := <-b.tr.Consumer():
		t.Fatalf("closed transport handed %T to raft", rpc.Command)
	default:
	}
}

// gatedReader yields first, then blocks until gate is closed, then yields
// rest and io.EOF.
type gatedReader struct {
	first, rest []byte
	gate        <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if len(g.first) > 0 {
		n := copy(p, g.first)
		g.first = g.first[n:]
		return n, nil
	}
	<-g.gate
	if len(g.rest) > 0 {
		n := copy(p, g.rest)
		g.rest = g.rest[n:]
		return n, nil
	}
	return 0, io.EOF
}

func TestInstallSnapshotRefusesDataThatDoesNotMatchSize(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", nil)
	b := startNode(t, "127.0.0.1:0", nil)

	if err := a.tr.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{Size: -1}, &raft.InstallSnapshotResponse{}, bytes.NewReader(nil)); !errors.Is(err, ErrSnapshotSize) {
		t.Fatalf("negative size: error = %v, want ErrSnapshotSize", err)
	}

	for name, tc := range map[string]struct {
		size        int64
		first, rest []byte
	}{
		"short reader": {size: 10, first: []byte("12"), rest: []byte("345")},
		"long reader":  {size: 3, first: []byte("12"), rest: []byte("345")},
	} {
		t.Run(name, func(t *testing.T) {
			// The sender's reader blocks until raft holds the request, so
			// the abort happens while raft is reading the stream.
			taken := make(chan struct{})
			seen := make(chan received, 1)
			go func() {
				select {
				case rpc := <-b.tr.Consumer():
					close(taken)
					data, err := io.ReadAll(rpc.Reader)
					rpc.Respond(&raft.InstallSnapshotResponse{}, err)
					seen <- received{command: rpc.Command, data: data, readErr: err}
				case <-t.Context().Done():
				}
			}()
			data := &gatedReader{first: tc.first, rest: tc.rest, gate: taken}
			err := a.tr.InstallSnapshot("b", b.addr, &raft.InstallSnapshotRequest{Size: tc.size}, &raft.InstallSnapshotResponse{}, data)
			if !errors.Is(err, ErrSnapshotSize) {
				t.Fatalf("error = %v, want ErrSnapshotSize", err)
			}
			if r := <-seen; r.readErr == nil {
				t.Fatalf("raft read %q of an aborted snapshot without an error", r.data)
			}
		})
	}
}

func TestHeldVotesAreNeitherGrantedNorAskedAndOtherRPCsPass(t *testing.T) {
	a := startNode(t, "127.0.0.1:0", nil)
	b := startNode(t, "127.0.0.1:0", nil)
	b.tr.HoldVotes(true)
	for name, fn := range map[string]func() error{
		"request-vote": func() error {
			return a.tr.RequestVote("b", b.addr, &raft.RequestVoteRequest{Term: 2}, &raft.RequestVoteResponse{})
		},
		"request-pre-vote": func() error {
			return a.tr.RequestPreVote("b", b.addr, &raft.RequestPreVoteRequest{Term: 2}, &raft.RequestPreVoteResponse{})
		},
	} {
		if err := fn(); status.Code(err) != codes.Unavailable {
			t.Fatalf("%s while votes are held: error = %v, want Unavailable", name, err)
		}
	}
	select {
	case rpc := <-b.tr.Consumer():
		t.Fatalf("a held vote reached raft: %T", rpc.Command)
	default:
	}
	// Nor does b ask for votes.
	if err := b.tr.RequestVote("a", a.addr, &raft.RequestVoteRequest{Term: 2}, &raft.RequestVoteResponse{}); !errors.Is(err, ErrVotesHeld) {
		t.Fatalf("b's own request-vote while its votes are held: %v, want ErrVotesHeld", err)
	}
	if err := b.tr.RequestPreVote("a", a.addr, &raft.RequestPreVoteRequest{Term: 2}, &raft.RequestPreVoteResponse{}); !errors.Is(err, ErrVotesHeld) {
		t.Fatalf("b's own request-pre-vote while its votes are held: %v, want ErrVotesHeld", err)
	}
	select {
	case rpc := <-a.tr.Consumer():
		t.Fatalf("b's held vote request reached a's raft: %T", rpc.Command)
	default:
	}

	// Entries still arrive.
	seen := answerOne(t, b.tr, &raft.AppendEntriesResponse{Term: 2, Success: true}, nil)
	if _, err := call(a.tr, b.addr, &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 1}, nil); err != nil {
		t.Fatalf("append-entries while votes are held: %v", err)
	}
	if r := <-seen; r.command == nil {
		t.Fatal("append-entries did not reach raft")
	}

	b.tr.HoldVotes(false)
	seen = answerOne(t, b.tr, &raft.RequestVoteResponse{Term: 2, Granted: true}, nil)
	out, err := call(a.tr, b.addr, &raft.RequestVoteRequest{Term: 2}, nil)
	if err != nil || !out.(*raft.RequestVoteResponse).Granted {
		t.Fatalf("request-vote after the hold: %+v, %v", out, err)
	}
	<-seen
}
