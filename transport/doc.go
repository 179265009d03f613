// Package transport carries hashicorp/raft's peer RPCs over gRPC, so that a
// leasefence node serves Raft peers and clients on one gRPC port.
//
// A *Transport is both halves of the link:
//
//   - the client half implements raft.Transport, raft.WithPreVote and
//     raft.WithClose: it dials every peer lazily through one *grpc.ClientConn
//     per address and calls the RaftTransport service defined in
//     transportpb/transport.proto;
//   - the server half is registered on the node's own *grpc.Server with
//     Register and hands every incoming RPC to the local Raft through
//     Consumer (or the heartbeat fast path).
//
// See DESIGN.md in this folder for the message mapping, the pipeline, the
// snapshot stream and the shutdown rules.
package transport
