package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// Register attaches the server half of t (the RaftTransport gRPC service)
// to s. Call it once, before s serves. Every method of the service refuses
// a peer of another cluster before its handler runs
// (clusterIDInterceptors).
//
// The server's options apply to this service too: its receive limit
// (grpc.MaxRecvMsgSize, 4 MiB by default) bounds one AppendEntries batch,
// so it must exceed raft's MaxAppendEntries times the largest log entry.
// A request that is not valid protobuf is answered InvalidArgument
// (RejectMalformed).
func (t *Transport) Register(s grpc.ServiceRegistrar) {
	unary, stream := t.clusterIDInterceptors()
	s.RegisterService(WithInterceptors(RejectMalformed(&transportpb.RaftTransport_ServiceDesc), unary, stream), &rpcServer{t: t})
}

// rpcServer is the RaftTransport service. It converts each request, hands
// it to the local raft and converts raft's answer back. It never panics on
// network input: anything unconvertible is answered with InvalidArgument
// and never reaches raft.
type rpcServer struct {
	transportpb.UnimplementedRaftTransportServer
	t *Transport
}

// toStatus is the one table from this package's errors to gRPC status
// errors on the server side.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, raft.ErrTransportShutdown):
		return status.Error(codes.Unavailable, "transport: "+err.Error())
	case errors.Is(err, ErrInvalidMessage), errors.Is(err, ErrSnapshotSize):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// errVotesHeld answers vote requests while HoldVotes is set.
var errVotesHeld = status.Error(codes.Unavailable, ErrVotesHeld.Error())

// refuse logs a request that could not be converted and returns its status.
func (s *rpcServer) refuse(rpc string, err error) error {
	s.t.logger.Warn("refused malformed request", "rpc", rpc, "error", err)
	return toStatus(err)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func unexpectedResponse(got any) error {
	return status.Error(codes.Internal, fmt.Sprintf("%v: %T", ErrUnexpectedResponse, got))
}

// enqueue hands rpc to raft: to the heartbeat handler when heartbeat is set
// and a handler is installed, otherwise to Consumer. It fails with
// raft.ErrTransportShutdown once Close was called, and with the context's
// error when the caller gives up first.
func (t *Transport) enqueue(ctx context.Context, rpc raft.RPC, heartbeat bool) error {
	if t.isShutdown() {
		return raft.ErrTransportShutdown
	}
	if heartbeat {
		t.heartbeatMu.RLock()
		fn := t.heartbeatFn
		t.heartbeatMu.RUnlock()
		if fn != nil {
			fn(rpc)
			return nil
		}
	}
	select {
	case t.consumeCh <- rpc:
		return nil
	case <-t.shutdownCh:
		return raft.ErrTransportShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for raft's answer to an enqueued RPC. respCh must have room
// for one answer, so raft never blocks on an RPC whose caller left.
func (t *Transport) await(ctx context.Context, respCh <-chan raft.RPCResponse) (raft.RPCResponse, error) {
	select {
	case r := <-respCh:
		return r, nil
	case <-t.shutdownCh:
		return raft.RPCResponse{}, raft.ErrTransportShutdown
	case <-ctx.Done():
		return raft.RPCResponse{}, ctx.Err()
	}
}

// dispatch enqueues command and waits for raft's answer.
func (t *Transport) dispatch(ctx context.Context, command any, heartbeat bool) (raft.RPCResponse, error) {
	respCh := make(chan raft.RPCResponse, 1)
	if err := t.enqueue(ctx, raft.RPC{Command: command, RespChan: respCh}, heartbeat); err != nil {
		return raft.RPCResponse{}, err
	}
	return t.await(ctx, respCh)
}

// AppendEntries serves one AppendEntries, heartbeats included.
func (s *rpcServer) AppendEntries(ctx context.Context, in *transportpb.AppendEntriesRequest) (*transportpb.AppendEntriesResponse, error) {
	out, err := s.appendEntries(ctx, in)
	return out, toStatus(err)
}

func (s *rpcServer) appendEntries(ctx context.Context, in *transportpb.AppendEntriesRequest) (*transportpb.AppendEntriesResponse, error) {
	req, err := appendEntriesRequestFromPB(in)
	if err != nil {
		return nil, s.refuse("append-entries", err)
	}
	r, err := s.t.dispatch(ctx, req, isHeartbeat(req))
	if err != nil {
		return nil, err
	}
	return responseFrom(r, appendEntriesResponseToPB, func(out *transportpb.AppendEntriesResponse, e string) { out.Error = e })
}

// AppendEntriesPipeline serves a pipeline stream: requests are handed to
// raft one at a time, and each answer is sent before the next request is
// read, so responses leave in request order. A malformed request ends the
// stream with InvalidArgument.
func (s *rpcServer) AppendEntriesPipeline(stream grpc.BidiStreamingServer[transportpb.AppendEntriesRequest, transportpb.AppendEntriesResponse]) error {
	ctx := stream.Context()
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err := s.appendEntries(ctx, in)
		if err != nil {
			return toStatus(err)
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// RequestVote serves one RequestVote.
func (s *rpcServer) RequestVote(ctx context.Context, in *transportpb.RequestVoteRequest) (*transportpb.RequestVoteResponse, error) {
	req, err := requestVoteRequestFromPB(in)
	if err != nil {
		return nil, s.refuse("request-vote", err)
	}
	if s.t.votesHeld.Load() {
		return nil, errVotesHeld
	}
	r, err := s.t.dispatch(ctx, req, false)
	if err != nil {
		return nil, toStatus(err)
	}
	return responseFrom(r, requestVoteResponseToPB, func(out *transportpb.RequestVoteResponse, e string) { out.Error = e })
}

// RequestPreVote serves one RequestPreVote.
func (s *rpcServer) RequestPreVote(ctx context.Context, in *transportpb.RequestPreVoteRequest) (*transportpb.RequestPreVoteResponse, error) {
	req, err := requestPreVoteRequestFromPB(in)
	if err != nil {
		return nil, s.refuse("request-pre-vote", err)
	}
	if s.t.votesHeld.Load() {
		return nil, errVotesHeld
	}
	r, err := s.t.dispatch(ctx, req, false)
	if err != nil {
		return nil, toStatus(err)
	}
	return responseFrom(r, requestPreVoteResponseToPB, func(out *transportpb.RequestPreVoteResponse, e string) { out.Error = e })
}

// TimeoutNow serves one TimeoutNow.
func (s *rpcServer) TimeoutNow(ctx context.Context, in *transportpb.TimeoutNowRequest) (*transportpb.TimeoutNowResponse, error) {
	req, err := timeoutNowRequestFromPB(in)
	if err != nil {
		return nil, s.refuse("timeout-now", err)
	}
	r, err := s.t.dispatch(ctx, req, false)
	if err != nil {
		return nil, toStatus(err)
	}
	return responseFrom(r, timeoutNowResponseToPB, func(out *transportpb.TimeoutNowResponse, e string) { out.Error = e })
}

// InstallSnapshot serves a snapshot stream. The first message must carry
// the request; raft then gets an io.Reader that yields the data messages'
// bytes, ending with io.EOF when the sender half-closes after exactly Size
// bytes. A data message before the request, a second request, or more or
// fewer than Size bytes fail the reader and the RPC (InvalidArgument).
//
// The handler receives the stream on its own goroutine and writes into a
// pipe that raft reads; it does not return before that goroutine has ended,
// so the stream is never touched after the handler returns.
func (s *rpcServer) InstallSnapshot(stream grpc.ClientStreamingServer[transportpb.InstallSnapshotChunk, transportpb.InstallSnapshotResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return s.refuse("install-snapshot", invalidf("stream without a request"))
		}
		return err
	}
	req, err := installSnapshotRequestFromPB(first.GetRequest())
	if err != nil {
		return s.refuse("install-snapshot", err)
	}

	pr, pw := io.Pipe()
	respCh := make(chan raft.RPCResponse, 1)
	if err := s.t.enqueue(ctx, raft.RPC{Command: req, Reader: pr, RespChan: respCh}, false); err != nil {
		return toStatus(err)
	}
	// From here raft owns the RPC and reads pr.
	pumpDone := make(chan error, 1)
	go func() { pumpDone <- pumpSnapshot(stream, pw, req.Size) }()

	r, waitErr := s.t.await(ctx, respCh)
	// Unblock the pump if raft stopped reading (it answered, or is gone).
	_ = pr.CloseWithError(io.ErrClosedPipe)
	pumpErr := <-pumpDone
	if waitErr != nil {
		return toStatus(waitErr)
	}
	if errors.Is(pumpErr, ErrInvalidMessage) || errors.Is(pumpErr, ErrSnapshotSize) {
		return s.refuse("install-snapshot", pumpErr)
	}
	out := &transportpb.InstallSnapshotResponse{}
	switch resp := r.Response.(type) {
	case *raft.InstallSnapshotResponse:
		out = installSnapshotResponseToPB(resp)
	case nil:
		if r.Error == nil {
			return unexpectedResponse(nil)
		}
	default:
		return unexpectedResponse(resp)
	}
	out.Error = errorText(r.Error)
	return stream.SendAndClose(out)
}

// pumpSnapshot copies the data messages of stream into pw until the sender
// half-closes, then closes pw: with nil after exactly size bytes, with an
// error otherwise. It returns that error (nil on success), or the error
// that stopped the copy.
func pumpSnapshot(stream grpc.ClientStreamingServer[transportpb.InstallSnapshotChunk, transportpb.InstallSnapshotResponse], pw *io.PipeWriter, size int64) error {
	var received int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if received != size {
				err = fmt.Errorf("%w: stream ended after %d of %d bytes", ErrSnapshotSize, received, size)
				_ = pw.CloseWithError(err)
				return err
			}
			return pw.Close()
		}
		if err != nil {
			_ = pw.CloseWithError(err)
			return err
		}
		chunk, ok := msg.GetPayload().(*transportpb.InstallSnapshotChunk_Data)
		if !ok {
			err := invalidf("InstallSnapshot message after the first carries no data")
			_ = pw.CloseWithError(err)
			return err
		}
		if int64(len(chunk.Data)) > size-received {
			err := fmt.Errorf("%w: more than %d bytes", ErrSnapshotSize, size)
			_ = pw.CloseWithError(err)
			return err
		}
		if _, err := pw.Write(chunk.Data); err != nil {
			// raft stopped reading; the handler closed the pipe.
			return err
		}
		received += int64(len(chunk.Data))
	}
}

// responseFrom turns raft's answer to one RPC into its protobuf response:
// the converted response when raft gave one (an empty one when it gave only
// an error), with the error's text either way. Any other response type is a
// bug on raft's side, answered with an error rather than a panic.
func responseFrom[R, P any](r raft.RPCResponse, toPB func(*R) *P, setError func(*P, string)) (*P, error) {
	out := new(P)
	switch resp := r.Response.(type) {
	case *R:
		out = toPB(resp)
	case nil:
		if r.Error == nil {
			return nil, unexpectedResponse(nil)
		}
	default:
		return nil, unexpectedResponse(resp)
	}
	setError(out, errorText(r.Error))
	return out, nil
}
