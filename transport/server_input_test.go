package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// rawClient dials n without a Transport, to send what no Transport would.
func rawClient(t *testing.T, n *testNode) (*grpc.ClientConn, transportpb.RaftTransportClient) {
	t.Helper()
	conn, err := grpc.NewClient(string(n.addr), insecureDial()...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, transportpb.NewRaftTransportClient(conn)
}

// refuseConsumer fails the test if anything reaches tr's raft.
func refuseConsumer(t *testing.T, tr *Transport) {
	go func() {
		select {
		case rpc := <-tr.Consumer():
			t.Errorf("invalid input reached raft: %#v", rpc.Command)
			rpc.Respond(nil, errors.New("test: unexpected"))
		case <-t.Context().Done():
		}
	}()
}

func TestServerRefusesMalformedRequestsWithInvalidArgument(t *testing.T) {
	n := startNode(t, "127.0.0.1:0", nil)
	_, c := rawClient(t, n)
	hdr := &transportpb.RPCHeader{ProtocolVersion: 3, Id: []byte("x"), Addr: []byte("y")}
	tooMany := make([]*transportpb.Log, maxEntriesPerRequest+1)
	for i := range tooMany {
		tooMany[i] = &transportpb.Log{Index: uint64(i)}
	}

	cases := map[string]func(ctx context.Context) error{
		"append-entries without header": func(ctx context.Context) error {
			_, err := c.AppendEntries(ctx, &transportpb.AppendEntriesRequest{Term: 1})
			return err
		},
		"append-entries log type above 255": func(ctx context.Context) error {
			_, err := c.AppendEntries(ctx, &transportpb.AppendEntriesRequest{Header: hdr, Entries: []*transportpb.Log{{Type: 256}}})
			return err
		},
		"append-entries invalid timestamp": func(ctx context.Context) error {
			_, err := c.AppendEntries(ctx, &transportpb.AppendEntriesRequest{Header: hdr, Entries: []*transportpb.Log{{AppendedAt: &timestamppb.Timestamp{Nanos: -1}}}})
			return err
		},
		"append-entries too many entries": func(ctx context.Context) error {
			_, err := c.AppendEntries(ctx, &transportpb.AppendEntriesRequest{Header: hdr, Entries: tooMany})
			return err
		},
		"request-vote without header": func(ctx context.Context) error {
			_, err := c.RequestVote(ctx, &transportpb.RequestVoteRequest{Term: 1})
			return err
		},
		"request-pre-vote without header": func(ctx context.Context) error {
			_, err := c.RequestPreVote(ctx, &transportpb.RequestPreVoteRequest{Term: 1})
			return err
		},
		"timeout-now without header": func(ctx context.Context) error {
			_, err := c.TimeoutNow(ctx, &transportpb.TimeoutNowRequest{})
			return err
		},
		"pipeline request without header": func(ctx context.Context) error {
			s, err := c.AppendEntriesPipeline(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&transportpb.AppendEntriesRequest{Term: 1}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"install-snapshot empty stream": func(ctx context.Context) error {
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		},
		"install-snapshot data before request": func(ctx context.Context) error {
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				return err
			}
			_ = s.Send(&transportpb.InstallSnapshotChunk{Payload: &transportpb.InstallSnapshotChunk_Data{Data: []byte("x")}})
			_, err = s.CloseAndRecv()
			return err
		},
		"install-snapshot empty first message": func(ctx context.Context) error {
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				return err
			}
			_ = s.Send(&transportpb.InstallSnapshotChunk{})
			_, err = s.CloseAndRecv()
			return err
		},
		"install-snapshot request without header": func(ctx context.Context) error {
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				return err
			}
			_ = s.Send(&transportpb.InstallSnapshotChunk{Payload: &transportpb.InstallSnapshotChunk_Request{Request: &transportpb.InstallSnapshotRequest{Size: 1}}})
			_, err = s.CloseAndRecv()
			return err
		},
		"install-snapshot negative size": func(ctx context.Context) error {
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				return err
			}
			_ = s.Send(&transportpb.InstallSnapshotChunk{Payload: &transportpb.InstallSnapshotChunk_Request{Request: &transportpb.InstallSnapshotRequest{Header: hdr, Size: -5}}})
			_, err = s.CloseAndRecv()
			return err
		},
	}
	refuseConsumer(t, n.tr)
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := fn(ctx); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
		})
	}
}

func TestServerRefusesSnapshotStreamsThatBreakTheProtocol(t *testing.T) {
	n := startNode(t, "127.0.0.1:0", nil)
	_, c := rawClient(t, n)
	hdr := &transportpb.RPCHeader{ProtocolVersion: 3}
	request := func(size int64) *transportpb.InstallSnapshotChunk {
		return &transportpb.InstallSnapshotChunk{Payload: &transportpb.InstallSnapshotChunk_Request{Request: &transportpb.InstallSnapshotRequest{Header: hdr, Size: size}}}
	}
	data := func(s string) *transportpb.InstallSnapshotChunk {
		return &transportpb.InstallSnapshotChunk{Payload: &transportpb.InstallSnapshotChunk_Data{Data: []byte(s)}}
	}

	// These are valid up to the first message, so raft gets the request;
	// its reader must then fail and the RPC end with InvalidArgument.
	cases := map[string][]*transportpb.InstallSnapshotChunk{
		"more data than size":  {request(3), data("12"), data("34")},
		"less data than size":  {request(10), data("12")},
		"second request":       {request(4), data("12"), request(4)},
		"data-less later part": {request(4), data("12"), {}},
	}
	for name, msgs := range cases {
		t.Run(name, func(t *testing.T) {
			readErr := make(chan error, 1)
			go func() {
				select {
				case rpc := <-n.tr.Consumer():
					_, err := io.ReadAll(rpc.Reader)
					rpc.Respond(&raft.InstallSnapshotResponse{}, err)
					readErr <- err
				case <-t.Context().Done():
					readErr <- t.Context().Err()
				}
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			s, err := c.InstallSnapshot(ctx)
			if err != nil {
				t.Fatalf("InstallSnapshot: %v", err)
			}
			for _, m := range msgs {
				if err := s.Send(m); err != nil {
					break // the server ended the stream; CloseAndRecv has its status
				}
			}
			_, err = s.CloseAndRecv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
			if err := <-readErr; err == nil {
				t.Fatal("raft's reader ended cleanly on a broken stream")
			}
		})
	}
}

// rawCodec sends bytes as they are, to put garbage on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func TestServerSurvivesGarbageOnTheWire(t *testing.T) {
	n := startNode(t, "127.0.0.1:0", nil)
	conn, c := rawClient(t, n)
	refuseConsumer(t, n.tr)

	garbage := [][]byte{
		{0xff, 0xff, 0xff, 0xff},
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, // header field with an absurd length
		{0x32, 0x02, 0x18},                   // truncated entry
	}
	for _, method := range []string{"AppendEntries", "RequestVote", "RequestPreVote", "TimeoutNow"} {
		for i, g := range garbage {
			t.Run(fmt.Sprintf("%s-%d", method, i), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				var out []byte
				err := conn.Invoke(ctx, "/leasefence.transport.v1.RaftTransport/"+method, &g, &out, grpc.ForceCodec(rawCodec{}))
				if err == nil {
					t.Fatal("garbage accepted")
				}
				if code := status.Code(err); code != codes.InvalidArgument {
					t.Fatalf("error = %v, want InvalidArgument (a malformed request is the caller's fault)", err)
				}
			})
		}
	}
	// Still serving.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c.TimeoutNow(ctx, &transportpb.TimeoutNowRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("after garbage: error = %v, want InvalidArgument", err)
	}
}

func TestServerHandlersRefuseNilMessages(t *testing.T) {
	tr, err := New(Config{LocalAddr: "127.0.0.1:1", Logger: newTestLogger(t, "nil"), DialOptions: insecureDial()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	refuseConsumer(t, tr)
	s := &rpcServer{t: tr}
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["append-entries"] = s.AppendEntries(ctx, nil)
	_, checks["request-vote"] = s.RequestVote(ctx, nil)
	_, checks["request-pre-vote"] = s.RequestPreVote(ctx, nil)
	_, checks["timeout-now"] = s.TimeoutNow(ctx, nil)
	_, checks["append-entries nil entry"] = s.AppendEntries(ctx, &transportpb.AppendEntriesRequest{
		Header: &transportpb.RPCHeader{}, Entries: []*transportpb.Log{nil},
	})
	for name, err := range checks {
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error = %v, want InvalidArgument", name, err)
		}
	}
}

func TestRaftAnsweringWithTheWrongTypeIsAnInternalError(t *testing.T) {
	n := startNode(t, "127.0.0.1:0", nil)
	_, c := rawClient(t, n)
	go func() {
		select {
		case rpc := <-n.tr.Consumer():
			rpc.Respond(&raft.TimeoutNowResponse{}, nil)
		case <-t.Context().Done():
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.RequestVote(ctx, &transportpb.RequestVoteRequest{Header: &transportpb.RPCHeader{}})
	if status.Code(err) != codes.Internal {
		t.Fatalf("error = %v, want Internal", err)
	}
}

func TestConfigValidateRejectsOutOfRangeFields(t *testing.T) {
	ok := Config{LocalAddr: "127.0.0.1:7001", DialOptions: insecureDial()}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no local address":   func(c *Config) { c.LocalAddr = "" },
		"negative timeout":   func(c *Config) { c.Timeout = -time.Second },
		"negative scale":     func(c *Config) { c.SnapshotTimeoutScale = -1 },
		"negative chunk":     func(c *Config) { c.SnapshotChunkSize = -1 },
		"oversized chunk":    func(c *Config) { c.SnapshotChunkSize = MaxSnapshotChunkSize + 1 },
		"negative in-flight": func(c *Config) { c.MaxPipelineInFlight = -1 },
		"negative reconnect": func(c *Config) { c.MaxReconnectDelay = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			if err := c.Validate(); c.DialOptions != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestSnapshotTimeoutScalesWithSizeAndSaturates(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		size int64
		want time.Duration
	}{
		{0, DefaultTimeout},
		{DefaultSnapshotTimeoutScale - 1, DefaultTimeout},
		{10 * DefaultSnapshotTimeoutScale, 10 * DefaultTimeout},
		{1 << 62, time.Duration(1<<63 - 1)},
	} {
		if got := c.snapshotTimeout(tc.size); got != tc.want {
			t.Errorf("snapshotTimeout(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
}

// FuzzRequestConversionNeverPanics feeds arbitrary bytes, decoded as each
// request type, through the server's conversions.
func FuzzRequestConversionNeverPanics(f *testing.F) {
	seed, _ := proto.Marshal(appendEntriesRequestToPB(&raft.AppendEntriesRequest{
		Term: 1, Entries: []*raft.Log{{Index: 1, Data: []byte("x"), AppendedAt: time.Unix(1, 1)}},
	}))
	f.Add(seed)
	seed, _ = proto.Marshal(installSnapshotRequestToPB(&raft.InstallSnapshotRequest{Size: 10, Configuration: []byte("c")}))
	f.Add(seed)
	f.Add([]byte{0x0a, 0x00, 0x32, 0x02, 0x18, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ae transportpb.AppendEntriesRequest
		if proto.Unmarshal(b, &ae) == nil {
			if req, err := appendEntriesRequestFromPB(&ae); err == nil {
				_ = isHeartbeat(req)
				_ = appendEntriesRequestToPB(req)
			}
		}
		var rv transportpb.RequestVoteRequest
		if proto.Unmarshal(b, &rv) == nil {
			_, _ = requestVoteRequestFromPB(&rv)
		}
		var is transportpb.InstallSnapshotRequest
		if proto.Unmarshal(b, &is) == nil {
			_, _ = installSnapshotRequestFromPB(&is)
		}
		var resp transportpb.AppendEntriesResponse
		if proto.Unmarshal(b, &resp) == nil {
			_ = appendEntriesResponseFromPB(&resp, new(raft.AppendEntriesResponse))
		}
	})
}

// Garbage on the transport's streams is InvalidArgument too, not Internal.
func TestServerStreamsAnswerGarbageWithInvalidArgument(t *testing.T) {
	n := startNode(t, "127.0.0.1:0", nil)
	conn, _ := rawClient(t, n)
	refuseConsumer(t, n.tr)
	for _, method := range []string{"AppendEntriesPipeline", "InstallSnapshot"} {
		t.Run(method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: method == "AppendEntriesPipeline"}
			st, err := conn.NewStream(ctx, desc, "/leasefence.transport.v1.RaftTransport/"+method, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			g := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}
			_ = st.SendMsg(&g)
			_ = st.CloseSend()
			var out []byte
			err = st.RecvMsg(&out)
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
		})
	}
}
