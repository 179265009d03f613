package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// answerAll answers every AppendEntries on tr until the benchmark ends.
func answerAll(b *testing.B, tr *Transport) { answerAfter(b, tr, 0) }

// answerAfter answers every AppendEntries on tr, each after delay, until
// the test ends.
func answerAfter(tb testing.TB, tr *Transport, delay time.Duration) {
	go func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				time.Sleep(delay)
				req := rpc.Command.(*raft.AppendEntriesRequest)
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil)
			case <-tb.Context().Done():
				return
			}
		}
	}()
}

func appendRequest(leader *testNode, prev uint64, entries, size int) *raft.AppendEntriesRequest {
	req := &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(leader.addr)},
		Term:         7,
		PrevLogEntry: prev,
		PrevLogTerm:  7,
	}
	for i := 0; i < entries; i++ {
		req.Entries = append(req.Entries, &raft.Log{Index: prev + uint64(i) + 1, Term: 7, Type: raft.LogCommand, Data: make([]byte, size)})
	}
	return req
}

// BenchmarkAppendEntries measures one AppendEntries round trip over real
// gRPC on loopback (unary), by batch shape.
//
//	go test -run '^$' -bench AppendEntries -benchmem ./transport/
func BenchmarkAppendEntries(b *testing.B) {
	for _, shape := range []struct{ entries, size int }{{0, 0}, {1, 128}, {64, 256}} {
		b.Run(fmt.Sprintf("entries=%d/size=%d", shape.entries, shape.size), func(b *testing.B) {
			leader, follower := startNode(b, "127.0.0.1:0", nil), startNode(b, "127.0.0.1:0", nil)
			answerAll(b, follower.tr)
			var resp raft.AppendEntriesResponse
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := appendRequest(leader, uint64(i*shape.entries), shape.entries, shape.size)
				if err := leader.tr.AppendEntries("follower", follower.addr, req, &resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendEntriesPipeline measures pipelined AppendEntries (the
// path raft uses in steady state), 64 entries of 256 bytes each.
func BenchmarkAppendEntriesPipeline(b *testing.B) {
	leader, follower := startNode(b, "127.0.0.1:0", nil), startNode(b, "127.0.0.1:0", nil)
	answerAll(b, follower.tr)
	p, err := leader.tr.AppendEntriesPipeline("follower", follower.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < b.N; i++ {
			f := <-p.Consumer()
			if err := f.Error(); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var resp raft.AppendEntriesResponse
		if _, err := p.AppendEntries(appendRequest(leader, uint64(i*64), 64, 256), &resp); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}
