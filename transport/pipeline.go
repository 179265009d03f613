package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/leasefence/leasefence/transport/transportpb"
)

// AppendEntriesPipeline implements raft.Transport. It opens one
// bidirectional AppendEntriesPipeline stream to target. Requests are sent
// in call order; up to Config.MaxPipelineInFlight may await their response,
// and AppendEntries blocks beyond that (back-pressure). Responses are
// matched to requests by order and their futures delivered, in that order,
// on the pipeline's Consumer.
//
// It returns raft.ErrPipelineReplicationNotSupported when
// MaxPipelineInFlight is 1, and raft.ErrTransportShutdown after Close.
func (t *Transport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.cfg.MaxPipelineInFlight < 2 {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	c, err := t.client(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	// Bound the stream's start (waiting for a connection) by Timeout
	// without putting a deadline on the stream itself.
	startTimer := time.AfterFunc(t.cfg.Timeout, cancel)
	stream, err := c.AppendEntriesPipeline(ctx)
	startTimer.Stop()
	if err != nil {
		cancel()
		return nil, t.callError("append-entries-pipeline", target, err)
	}
	p := &pipeline{
		t:          t,
		id:         id,
		target:     target,
		stream:     stream,
		cancel:     cancel,
		inflight:   make(chan *appendFuture, t.cfg.MaxPipelineInFlight),
		doneCh:     make(chan raft.AppendFuture, t.cfg.MaxPipelineInFlight),
		shutdownCh: make(chan struct{}),
		recvDone:   make(chan struct{}),
	}
	t.mu.Lock()
	if t.shutdown {
		t.mu.Unlock()
		cancel()
		return nil, raft.ErrTransportShutdown
	}
	t.pipelines[p] = struct{}{}
	t.mu.Unlock()
	go p.receive()
	return p, nil
}

// pipeline is the raft.AppendPipeline of one stream.
//
// Invariant: futures enter inflight in the order their requests are written
// to the stream (both happen under sendMu), and the server answers in
// request order, so the n-th response belongs to the n-th future taken
// from inflight.
type pipeline struct {
	t      *Transport
	id     raft.ServerID
	target raft.ServerAddress
	stream grpc.BidiStreamingClient[transportpb.AppendEntriesRequest, transportpb.AppendEntriesResponse]
	cancel context.CancelFunc // cancels the stream

	sendMu   sync.Mutex
	inflight chan *appendFuture // sent, awaiting a response; capacity MaxPipelineInFlight
	doneCh   chan raft.AppendFuture

	failMu sync.Mutex
	failed error // first stream error; later calls fail with it

	closeOnce  sync.Once
	shutdownCh chan struct{}
	recvDone   chan struct{}
}

// AppendEntries implements raft.AppendPipeline. It returns once the request
// is written to the stream; the future completes when its response arrives,
// the pipeline fails, or Timeout passes without a response. After the stream
// fails every call returns that error; after Close it returns
// raft.ErrPipelineShutdown.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	msg := p.t.appendEntriesToPB(args)
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}

	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.closed() {
		return nil, raft.ErrPipelineShutdown
	}
	if err := p.failure(); err != nil {
		return nil, err
	}
	select {
	case p.inflight <- f:
	case <-p.shutdownCh:
		return nil, raft.ErrPipelineShutdown
	}
	timer := time.AfterFunc(p.t.cfg.Timeout, p.cancel)
	f.sent.Store(int64(time.Since(monoBase)))
	err := p.stream.Send(msg)
	timer.Stop()
	if errors.Is(err, io.EOF) {
		// The stream has ended (the other side refused or closed it): its
		// status is what Recv returns, and the receiver fails this queued
		// future, and the pipeline, with it.
		return f, nil
	}
	if err != nil {
		// The future is queued: the receiver fails it with the stream's
		// status. Every later call fails at once.
		err = p.fail(p.t.callError("append-entries-pipeline", p.target, err))
		return nil, err
	}
	return f, nil
}

// Consumer implements raft.AppendPipeline: completed futures, in request
// order.
func (p *pipeline) Consumer() <-chan raft.AppendFuture {
	return p.doneCh
}

// Close implements raft.AppendPipeline. It cancels the stream, waits for
// the receiving goroutine to end and completes every future still awaiting
// a response with raft.ErrPipelineShutdown. It is idempotent.
func (p *pipeline) Close() error {
	p.closeOnce.Do(func() {
		close(p.shutdownCh)
		p.cancel()
		// Wait for a send in progress to give up (the stream is cancelled).
		p.sendMu.Lock()
		p.sendMu.Unlock() //nolint:staticcheck // an empty critical section is the point
		<-p.recvDone
	drain:
		for {
			select {
			case f := <-p.inflight:
				f.respond(raft.ErrPipelineShutdown)
			default:
				break drain
			}
		}
		p.t.mu.Lock()
		delete(p.t.pipelines, p)
		p.t.mu.Unlock()
	})
	return nil
}

func (p *pipeline) closed() bool {
	select {
	case <-p.shutdownCh:
		return true
	default:
		return false
	}
}

func (p *pipeline) failure() error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return p.failed
}

// fail records err as the pipeline's failure unless one is recorded, and
// returns the recorded one.
func (p *pipeline) fail(err error) error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	if p.failed == nil {
		p.failed = err
	}
	return p.failed
}

// receive matches responses to futures until Close. It is the only reader
// of the stream.
func (p *pipeline) receive() {
	defer close(p.recvDone)
	var timedOut atomic.Bool
	for {
		var f *appendFuture
		select {
		case f = <-p.inflight:
		case <-p.shutdownCh:
			return
		}
		if err := p.failure(); err != nil {
			f.respond(err)
		} else {
			timer := time.AfterFunc(p.t.cfg.Timeout, func() {
				timedOut.Store(true)
				p.cancel()
			})
			msg, err := p.stream.Recv()
			if !timer.Stop() && timedOut.Load() {
				err = context.DeadlineExceeded
			}
			if err != nil {
				f.respond(p.fail(p.t.callError("append-entries-pipeline", p.target, err)))
			} else {
				rerr := appendEntriesResponseFromPB(msg, f.resp)
				p.t.appended(p.id, monoBase.Add(time.Duration(f.sent.Load())), f.args, f.resp, rerr)
				if undecoded(rerr) {
					// Undecodable: the stream is out of step; stop using it.
					rerr = p.fail(p.t.callError("append-entries-pipeline", p.target, rerr))
					p.cancel()
				}
				f.respond(rerr)
			}
		}
		select {
		case p.doneCh <- f:
		case <-p.shutdownCh:
			return
		}
	}
}

// monoBase is the origin of appendFuture.sent (monotonic).
var monoBase = time.Now()

// appendFuture is the raft.AppendFuture of one pipelined request.
type appendFuture struct {
	start time.Time // submitted (raft's Start)
	// sent is when the request went to the stream, as time since
	// monoBase: atomic, as the receiver may take the future from inflight
	// before the sender sets it (and their only order is the network's).
	sent atomic.Int64
	args *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse

	once sync.Once
	err  error
	done chan struct{}
}

// respond completes the future; only the first call counts.
func (f *appendFuture) respond(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

// Error implements raft.Future: it blocks until the response arrived or the
// pipeline failed, and returns the outcome. Safe to call repeatedly and
// concurrently.
func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}

// Start implements raft.AppendFuture: when the request was submitted.
func (f *appendFuture) Start() time.Time { return f.start }

// Request implements raft.AppendFuture.
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.args }

// Response implements raft.AppendFuture; valid only after Error returned nil.
func (f *appendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
