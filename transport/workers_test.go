package transport

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A server with StreamWorkers keeps its workers; long calls that hold
// every one (watches, waiting acquires) must not queue a new call behind
// them: with all workers busy the server runs the call on a goroutine of
// its own.
func TestBusyStreamWorkersQueueNoCall(t *testing.T) {
	before := runtime.NumGoroutine()
	addr, _ := callsServer(t, false, nil, append(DefaultLimits().PeerServerOptions(), StreamWorkers())...)
	// Half, not all: goroutines of earlier tests may end meanwhile.
	if n := runtime.NumGoroutine() - before; n < streamWorkers/2 {
		t.Fatalf("%d goroutines started with the server, want its %d stream workers", n, streamWorkers)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A health watch answers once, then its handler stays until the
	// caller leaves: each holds a worker (or a goroutine) for good.
	for i := 0; i < streamWorkers+8; i++ {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("watch %d: first answer: %v", i, err)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call with every worker busy: %v", err)
	}
}
