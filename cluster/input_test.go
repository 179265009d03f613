package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
)

// Names that display as something else (bidi overrides, zero-width
// characters) are refused like other invalid names, so that leasectl
// never shows two resources that look alike.
func TestAcquireRefusesNamesThatSpoofTheirDisplay(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	c := tc.client(0)
	for _, bad := range []string{"db/\u202e93", "db/\u202a1", "db/\u2066x", "db/\u2069", "db/\u200b39", "db/3\u200d9", "\ufeffdb/39"} {
		_, err := c.Acquire(ctxT(t), acquireReq(bad, 5*time.Second))
		wantCode(t, "resource "+bad, err, codes.InvalidArgument)
		req := acquireReq("db/ok", 5*time.Second)
		req.Scope = bad
		_, err = c.Acquire(ctxT(t), req)
		wantCode(t, "scope "+bad, err, codes.InvalidArgument)
	}
	if _, err := c.Acquire(ctxT(t), acquireReq("db/ünïcödé/日本", 5*time.Second)); err != nil {
		t.Fatalf("a plain unicode name: %v", err)
	}
}

// watchErr opens a watch and returns the error its first Recv gets within
// a deadline (nil when an event arrives first).
func watchErr(t *testing.T, c api.LeaseServiceClient, req *api.WatchRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, req)
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// Watch keys follow the rules of names: no NUL or other control characters,
// no display spoofing; InvalidArgument.
func TestWatchRefusesKeysWithControlOrSpoofingCharacters(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	c := tc.client(0)
	for _, bad := range []string{"a\x00b", "a\x1bb", "a\nb", "a\x7f", "a\u202eb", "a\u200b"} {
		for _, prefix := range []bool{false, true} {
			err := watchErr(t, c, &api.WatchRequest{Key: bad, Prefix: prefix})
			wantCode(t, "watch key "+bad, err, codes.InvalidArgument)
		}
	}
}

// A resume position beyond the node's log cannot have come from this
// cluster: OutOfRange (documented), instead of a watch that waits for
// positions that never come. A position the node has applied is fine.
func TestWatchAfterBeyondTheLogIsOutOfRange(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	c := tc.client(0)
	if _, err := c.Acquire(ctxT(t), acquireReq("w/1", 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	applied := tc.nodes[0].AppliedIndex()
	start := time.Now()
	err := watchErr(t, c, &api.WatchRequest{Key: "w/", Prefix: true, After: &api.Position{Index: applied + 1_000_000}})
	wantCode(t, "after beyond the log", err, codes.OutOfRange)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused only after %v", d)
	}
	// From a position it has: the next event arrives.
	go func() {
		time.Sleep(100 * time.Millisecond)
		c.Acquire(context.Background(), acquireReq("w/2", 5*time.Second))
	}()
	if err := watchErr(t, c, &api.WatchRequest{Key: "w/", Prefix: true, After: &api.Position{Index: applied}}); err != nil {
		t.Fatalf("after an applied position: %v", status.Convert(err))
	}
}

// rawBytes sends bytes as they are, to put malformed protobuf on the wire.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawBytes) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

// A request that is not valid protobuf is the caller's fault:
// InvalidArgument, not Internal, on unary calls and on streams.
func TestMalformedProtobufIsInvalidArgument(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	conn, err := grpc.NewClient(tc.cfgs[0].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f} // field 1 with an absurd length
	for _, m := range []string{"/leasefence.v1.LeaseService/Acquire", "/leasefence.v1.LeaseService/Get", "/leasefence.v1.ClusterService/Join", "/leasefence.v1.ClusterService/Status"} {
		var out []byte
		err := conn.Invoke(ctxT(t), m, &garbage, &out, grpc.ForceCodec(rawBytes{}))
		wantCode(t, m, err, codes.InvalidArgument)
	}
	for _, m := range []string{"/leasefence.v1.LeaseService/Watch", "/leasefence.v1.LeaseService/KeepAlive"} {
		st, err := conn.NewStream(ctxT(t), &grpc.StreamDesc{ServerStreams: true, ClientStreams: strings.HasSuffix(m, "KeepAlive")}, m, grpc.ForceCodec(rawBytes{}))
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SendMsg(&garbage)
		_ = st.CloseSend()
		var out []byte
		wantCode(t, m, st.RecvMsg(&out), codes.InvalidArgument)
	}
}
