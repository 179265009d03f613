package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Registry returns the node's Prometheus registry, for an application that
// embeds the node and serves metrics itself.
func (n *Node) Registry() *prometheus.Registry { return n.metrics.reg }

// MetricsAddr returns the address of the metrics HTTP server ("" if off).
func (n *Node) MetricsAddr() string { return n.httpAddr }

// healthy reports whether the node can serve: not failed, its state not
// found corrupt (statecheck.go), and a leader is known (so writes and
// linearizable reads can be answered or forwarded).
func (n *Node) healthy() (bool, string) {
	if err := n.Err(); err != nil {
		return false, err.Error()
	}
	if c := n.StateCorrupt(); c != "" {
		return false, ErrStateCorrupt.Error() + ": " + c
	}
	if id, _ := n.Leader(); id == "" {
		return false, "no leader known"
	}
	return true, "ok"
}

// healthLoop keeps the gRPC health service (grpc.health.v1) in step with
// healthy(), for the overall server ("") and the lease service.
func (n *Node) healthLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok, _ := n.healthy(); ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		n.health.SetServingStatus("", st)
		n.health.SetServingStatus("leasefence.v1.LeaseService", st)
		select {
		case <-n.stopCh:
			n.health.Shutdown()
			return
		case <-t.C:
		}
	}
}

// startHTTP serves /metrics, /healthz, the status page (/ and /status)
// when Config.StatusPage is set and, only when Config.Pprof is set,
// /debug/pprof/ on Config.MetricsListen.
func (n *Node) startHTTP() error {
	if n.cfg.MetricsListen == "" {
		return nil
	}
	lis, err := net.Listen("tcp", n.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("cluster: metrics listen: %w", err)
	}
	n.httpAddr = lis.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := n.healthy()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	if n.cfg.StatusPage {
		mux.HandleFunc("/", n.serveStatusPage)
	}
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	n.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.httpSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("metrics server stopped", "error", err)
		}
	}()
	n.log.Info("serving metrics", "addr", n.httpAddr, "status-page", n.cfg.StatusPage, "pprof", n.cfg.Pprof)
	return nil
}
