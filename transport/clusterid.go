package transport

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClusterIDHeader is the metadata key under which every Raft RPC carries
// the sender's cluster id (Config.ClusterID), and under which a node
// answers Join with its own.
const ClusterIDHeader = "leasefence-cluster-id"

// clusterIDDialOptions returns the interceptors that put the local cluster
// id on every outgoing RPC. With no ClusterID function, none.
func (t *Transport) clusterIDDialOptions() []grpc.DialOption {
	if t.cfg.ClusterID == nil {
		return nil
	}
	attach := func(ctx context.Context) context.Context {
		if id := t.cfg.ClusterID(); id != "" {
			return metadata.AppendToOutgoingContext(ctx, ClusterIDHeader, id)
		}
		return ctx
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(attach(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(attach(ctx), desc, cc, method, opts...)
		}),
	}
}

// clusterIDInterceptors return the interceptors that refuse, with
// FailedPrecondition, a Raft RPC whose sender belongs to another cluster
// than this node: a node founded from another member list, or restored
// from another backup or with another token bump, must neither vote nor
// replicate here (its token floor may be lower than this cluster's). An
// RPC without the header, or a node without a cluster id yet (a joining
// node, a data dir from before identity files), is let through.
//
// Register installs them around every method and stream of the
// RaftTransport service, inside whatever interceptors the server has
// (after the peer-certificate check, PeerInterceptors) and before the
// handler reads anything: a handler cannot forget the check, and neither
// can a server that registers the transport.
func (t *Transport) clusterIDInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := t.checkClusterID(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := t.checkClusterID(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// checkClusterID is the check of clusterIDInterceptors for one call of
// method.
func (t *Transport) checkClusterID(ctx context.Context, method string) error {
	if t.cfg.ClusterID == nil {
		return nil
	}
	mine := t.cfg.ClusterID()
	if mine == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(ClusterIDHeader)
	if len(v) == 0 || v[0] == mine {
		return nil
	}
	err := fmt.Sprintf("transport: the peer belongs to cluster %q, this node to cluster %q: "+
		"nodes founded from different member lists, or restored from different backups or "+
		"with different --bump-tokens or --restore-epoch, never form one cluster (docs/OPERATIONS.md, Restore)", v[0], mine)
	if t.logForeign() {
		t.logger.Error("refused a Raft RPC from another cluster", "method", method, "peer-cluster-id", v[0], "cluster-id", mine)
	}
	return status.Error(codes.FailedPrecondition, err)
}

// foreignLogEvery bounds the refusal log of checkClusterID: a foreign
// peer retries several times a second.
const foreignLogEvery = 10 * time.Second

// logForeign reports whether a refusal may be logged now.
func (t *Transport) logForeign() bool {
	now := time.Now().UnixNano()
	last := t.foreignLogged.Load()
	if last != 0 && now-last < int64(foreignLogEvery) {
		return false
	}
	return t.foreignLogged.CompareAndSwap(last, now)
}
