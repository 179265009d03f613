package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// maxCallBatchBytes bounds the payload packed into one CallBatch or
// AnswerBatch message; more goes into the next message. It stays far below
// every peer message limit.
const maxCallBatchBytes = 1 << 20

// maxCallsInFlight bounds the calls of one stream that a CallServer runs at
// once; past it the server stops reading the stream until some finish, and
// gRPC's flow control holds the caller back.
const maxCallsInFlight = 16384

// CallServer serves the Calls service: it runs the unary calls a peer sends
// in batches through the methods of the services added to it, with the
// interceptors a gRPC server would run around them, and answers them in
// batches.
type CallServer struct {
	transportpb.UnimplementedCallsServer
	unary   grpc.UnaryServerInterceptor
	methods map[string]callMethod
}

type callMethod struct {
	impl    any
	handler func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error)
}

// NewCallServer returns a CallServer that runs unary (nil: none) around
// every call, as a gRPC server runs its chained unary interceptors.
func NewCallServer(unary grpc.UnaryServerInterceptor) *CallServer {
	if unary == nil {
		unary = func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}
	}
	return &CallServer{unary: unary, methods: map[string]callMethod{}}
}

// Add makes the unary methods of desc, served by impl, callable through s.
// Only methods added are: any other is answered Unimplemented.
func (s *CallServer) Add(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		s.methods["/"+desc.ServiceName+"/"+m.MethodName] = callMethod{impl: impl, handler: m.Handler}
	}
}

// Register registers the Calls service on reg.
func (s *CallServer) Register(reg grpc.ServiceRegistrar) {
	reg.RegisterService(RejectMalformed(&transportpb.Calls_ServiceDesc), s)
}

// Batch implements transportpb.CallsServer: every call of a message starts
// at once, each in its own goroutine, and the answers ready together leave
// in one message. When the caller closes its side, the calls still running
// are answered before the stream ends.
func (s *CallServer) Batch(stream transportpb.Calls_BatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	out := newAnswerQueue()
	sent := make(chan error, 1)
	go func() { sent <- out.sendAll(stream) }()
	slots := make(chan struct{}, maxCallsInFlight)
	var running sync.WaitGroup
	// end answers what still runs (cut first unless the caller merely
	// closed its side) and returns once the answers are out.
	end := func(err error) error {
		if err != io.EOF {
			cancel()
		}
		running.Wait()
		out.finish()
		if serr := <-sent; err == io.EOF {
			return serr
		}
		return err
	}
	for {
		b, err := stream.Recv()
		if err != nil {
			return end(err)
		}
		for _, c := range b.Calls {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return end(ctx.Err())
			}
			running.Add(1)
			go func() {
				defer running.Done()
				out.add(s.run(ctx, c))
				<-slots
			}()
		}
	}
}

// run runs one call and returns its answer.
func (s *CallServer) run(ctx context.Context, c *transportpb.Call) *transportpb.Answer {
	a := &transportpb.Answer{Id: c.Id}
	m, ok := s.methods[c.Method]
	if !ok {
		a.Status = marshalStatus(status.Newf(codes.Unimplemented, "method %q is not callable through Calls", c.Method))
		return a
	}
	if len(c.Metadata) > 0 {
		md := make(metadata.MD, len(c.Metadata))
		for _, kv := range c.Metadata {
			md.Append(kv.Key, kv.Value)
		}
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	if c.TimeoutNs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(c.TimeoutNs))
		defer cancel()
	}
	dec := func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "request type %T is not a protobuf message", v)
		}
		if err := proto.Unmarshal(c.Request, msg); err != nil {
			return status.Error(codes.InvalidArgument, "malformed request: "+err.Error())
		}
		return nil
	}
	resp, err := m.handler(m.impl, ctx, dec, s.unary)
	if err == nil {
		msg, ok := resp.(proto.Message)
		if !ok {
			err = status.Errorf(codes.Internal, "response type %T is not a protobuf message", resp)
		} else if a.Response, err = proto.Marshal(msg); err != nil {
			err = status.Errorf(codes.Internal, "marshal response: %v", err)
		}
	}
	if err != nil {
		a.Response = nil
		a.Status = marshalStatus(statusOf(err))
	}
	return a
}

// statusOf is the status a handler's error is answered with, as gRPC's
// own server makes it: a status error as it is, a context error as its
// code (DeadlineExceeded, Canceled), anything else Unknown. status.Convert
// made a context error Unknown, which the caller reads as a failure whose
// outcome is unknown; the caller's deadline often ends the handler a
// moment before the caller's own timer fires.
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

func marshalStatus(st *status.Status) []byte {
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		b, _ = proto.Marshal(&spb.Status{Code: int32(codes.Internal), Message: "marshal status: " + err.Error()})
	}
	return b
}

// answerQueue collects the answers of a stream's calls for its sender.
type answerQueue struct {
	mu    sync.Mutex
	ready []*transportpb.Answer
	done  bool
	wake  chan struct{}
}

func newAnswerQueue() *answerQueue { return &answerQueue{wake: make(chan struct{}, 1)} }

func (q *answerQueue) add(a *transportpb.Answer) {
	q.mu.Lock()
	q.ready = append(q.ready, a)
	q.mu.Unlock()
	poke(q.wake)
}

// finish tells sendAll to return once it has sent what is queued.
func (q *answerQueue) finish() {
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
	poke(q.wake)
}

// poke wakes the sender waiting on wake (a channel of capacity 1), or
// leaves it woken.
func poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// firstMessage returns how many of items, at least one, fit in one message
// of maxCallBatchBytes when each costs size(item).
func firstMessage[T any](items []T, size func(T) int) int {
	n, total := 1, size(items[0])
	for n < len(items) && total+size(items[n]) <= maxCallBatchBytes {
		total += size(items[n])
		n++
	}
	return n
}

// answerSize and callSize are what an answer or a call adds to a message:
// its bytes and a bound on its framing.
func answerSize(a *transportpb.Answer) int { return len(a.Response) + len(a.Status) + 16 }
func callSize(c *transportpb.Call) int     { return len(c.Request) + 64 }

// sendAll sends the answers as they come, those ready together in one
// message (up to maxCallBatchBytes), until finish or a failed send. After
// a failed send it keeps draining the queue without sending.
func (q *answerQueue) sendAll(stream transportpb.Calls_BatchServer) error {
	var spare []*transportpb.Answer
	var failed error
	for {
		<-q.wake
		q.mu.Lock()
		all, done := q.ready, q.done
		q.ready = spare[:0]
		q.mu.Unlock()
		for batch := all; len(batch) > 0 && failed == nil; {
			n := firstMessage(batch, answerSize)
			if err := stream.Send(&transportpb.AnswerBatch{Answers: batch[:n]}); err != nil {
				failed = err
			}
			batch = batch[n:]
		}
		clear(all)
		spare = all[:0]
		if done {
			return failed
		}
	}
}

// CallConn carries the unary calls made through it on one Calls stream to
// the node behind cc, the calls ready together in one message. It
// implements grpc.ClientConnInterface for unary methods; streams go to cc
// itself. A stream that breaks fails the calls it carried with Unavailable
// (their outcome unknown, as a unary call cut mid-way); the next call opens
// a new one. A node that does not serve Calls (an older version) gets
// every call as a unary call of its own.
type CallConn struct {
	cc *grpc.ClientConn

	mu     sync.Mutex
	st     *callStream // nil: none open
	closed bool
	unary  atomic.Bool // the peer does not serve Calls

	calls, messages atomic.Uint64
}

// NewCallConn returns a CallConn over cc. It opens no stream until the
// first call.
func NewCallConn(cc *grpc.ClientConn) *CallConn { return &CallConn{cc: cc} }

// Stats reports how many calls went out through the stream, and in how
// many messages.
func (c *CallConn) Stats() (calls, messages uint64) { return c.calls.Load(), c.messages.Load() }

// NewStream implements grpc.ClientConnInterface: streams are not batched.
func (c *CallConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.cc.NewStream(ctx, desc, method, opts...)
}

// Close ends the open stream, failing the calls in flight on it.
func (c *CallConn) Close() {
	c.mu.Lock()
	st := c.st
	c.st, c.closed = nil, true
	c.mu.Unlock()
	if st != nil {
		st.cancel()
	}
}

// errStreamLost is how a call learns that its stream broke before its
// answer came.
var errStreamLost = status.Error(codes.Unavailable, "transport: the stream of batched calls broke before the call was answered; its outcome is unknown")

// errResendUnary tells a call that the peer does not serve Calls and never
// saw it.
var errResendUnary = errors.New("transport: peer does not serve Calls")

// Invoke implements grpc.ClientConnInterface: it sends the call on the
// stream and waits for its answer or for ctx to end.
func (c *CallConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if c.unary.Load() {
		return c.cc.Invoke(ctx, method, args, reply, opts...)
	}
	req, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "request type %T is not a protobuf message", args)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return status.Errorf(codes.Internal, "marshal request: %v", err)
	}
	call := &transportpb.Call{Method: method, Request: body}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return status.FromContextError(context.DeadlineExceeded).Err()
		}
		call.TimeoutNs = int64(left)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		for k, vs := range md {
			for _, v := range vs {
				call.Metadata = append(call.Metadata, &transportpb.Metadata{Key: k, Value: v})
			}
		}
	}
	st, err := c.stream()
	if err != nil {
		return err
	}
	w := st.submit(call)[0]
	select {
	case a := <-w:
		if a.err == errResendUnary {
			return c.cc.Invoke(ctx, method, args, reply, opts...)
		}
		if a.err != nil {
			return a.err
		}
		return decodeAnswer(a.answer, reply)
	case <-ctx.Done():
		st.forget(call.Id)
		return status.FromContextError(ctx.Err()).Err()
	}
}

func decodeAnswer(a *transportpb.Answer, reply any) error {
	if len(a.Status) > 0 {
		var sp spb.Status
		if err := proto.Unmarshal(a.Status, &sp); err != nil {
			return status.Errorf(codes.Internal, "undecodable status in answer: %v", err)
		}
		if sp.Code == int32(codes.OK) {
			return status.Error(codes.Internal, "answer carries an OK status and no response")
		}
		return status.FromProto(&sp).Err()
	}
	msg, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "reply type %T is not a protobuf message", reply)
	}
	if err := proto.Unmarshal(a.Response, msg); err != nil {
		return status.Errorf(codes.Internal, "undecodable response: %v", err)
	}
	return nil
}

// stream returns the open stream, opening one when none is. Calls may be
// submitted at once; they leave when the stream is open.
func (c *CallConn) stream() (*callStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, status.Error(codes.Unavailable, "transport: connection closed")
	}
	if c.st == nil {
		ctx, cancel := context.WithCancel(context.Background())
		c.st = &callStream{conn: c, cancel: cancel, pending: map[uint64]chan outcome{}, wake: make(chan struct{}, 1)}
		go c.st.run(ctx)
	}
	return c.st, nil
}

// outcome is what a call waiting on a stream learns.
type outcome struct {
	answer *transportpb.Answer
	err    error
}

// callStream is one Calls stream of a CallConn.
type callStream struct {
	conn   *CallConn
	cancel context.CancelFunc

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan outcome
	outbox  []*transportpb.Call
	broken  error
	wake    chan struct{}
}

// run opens the stream, then sends the queued calls, those queued together
// in one message, while recvLoop hands out the answers.
func (st *callStream) run(ctx context.Context) {
	s, err := transportpb.NewCallsClient(st.conn.cc).Batch(ctx)
	if err != nil {
		// Nothing was sent: the calls fail as a unary call that could not
		// reach its server does.
		st.fail(err)
		return
	}
	go st.recvLoop(s)
	var spare []*transportpb.Call
	for {
		select {
		case <-st.wake:
		case <-ctx.Done():
			return
		}
		st.mu.Lock()
		all := st.outbox
		st.outbox = spare[:0]
		st.mu.Unlock()
		for batch := all; len(batch) > 0; {
			n := firstMessage(batch, callSize)
			if err := s.Send(&transportpb.CallBatch{Calls: batch[:n]}); err != nil {
				// The stream is aborted; recvLoop learns why and fails
				// the calls.
				return
			}
			st.conn.calls.Add(uint64(n))
			st.conn.messages.Add(1)
			batch = batch[n:]
		}
		clear(all)
		spare = all[:0]
	}
}

// submit queues calls, giving each an id, and returns where their
// outcomes arrive. Calls queued while the sender is busy leave together.
func (st *callStream) submit(calls ...*transportpb.Call) []chan outcome {
	ws := make([]chan outcome, len(calls))
	st.mu.Lock()
	for i, call := range calls {
		w := make(chan outcome, 1)
		ws[i] = w
		if st.broken != nil {
			w <- outcome{err: st.broken}
			continue
		}
		st.next++
		call.Id = st.next
		st.pending[call.Id] = w
		st.outbox = append(st.outbox, call)
	}
	st.mu.Unlock()
	poke(st.wake)
	return ws
}

// forget drops a call whose caller stopped waiting; a later answer is
// ignored.
func (st *callStream) forget(id uint64) {
	st.mu.Lock()
	delete(st.pending, id)
	st.mu.Unlock()
}

// recvLoop hands each answer to its call until the stream ends.
func (st *callStream) recvLoop(s transportpb.Calls_BatchClient) {
	for {
		b, err := s.Recv()
		if err != nil {
			if status.Code(err) == codes.Unimplemented {
				// Refused as a whole before any call ran: an older node.
				st.conn.unary.Store(true)
				st.fail(errResendUnary)
				return
			}
			st.fail(errStreamLost)
			return
		}
		st.mu.Lock()
		for _, a := range b.Answers {
			if w, ok := st.pending[a.Id]; ok {
				delete(st.pending, a.Id)
				w <- outcome{answer: a}
			}
		}
		st.mu.Unlock()
	}
}

// fail breaks the stream: every call waiting on it gets err, later ones
// too, and the CallConn opens a new stream for the next call.
func (st *callStream) fail(err error) {
	st.conn.mu.Lock()
	if st.conn.st == st {
		st.conn.st = nil
	}
	st.conn.mu.Unlock()
	st.mu.Lock()
	if st.broken == nil {
		st.broken = err
	}
	for id, w := range st.pending {
		delete(st.pending, id)
		w <- outcome{err: st.broken}
	}
	st.outbox = nil
	st.mu.Unlock()
	st.cancel()
}
