package transport

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A request that is not valid protobuf is the caller's fault and should be
// answered InvalidArgument. gRPC answers Internal: the server's RecvMsg
// writes that status itself the moment the codec fails, before any
// handler or interceptor can change it. So a node serves with ServerCodec,
// which never fails on a protobuf message: it leaves the message empty
// with one marker in its unknown fields (the field number below, carrying
// the decode error), and RejectMalformed's handlers answer a marked
// message with InvalidArgument. A service registered without
// RejectMalformed sees an empty request.

// malformedField is the field number of the marker: the largest protobuf
// allows, used by none of our messages.
const malformedField = protowire.MaxValidNumber

// ServerCodec returns the codec a node's gRPC server uses
// (grpc.ForceServerCodecV2): gRPC's proto codec, except that a request it
// cannot decode is marked rather than refused (see RejectMalformed).
func ServerCodec() encoding.CodecV2 {
	return markingCodec{encoding.GetCodecV2("proto")}
}

type markingCodec struct{ encoding.CodecV2 }

func (c markingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	proto.Reset(m)
	var mark []byte
	mark = protowire.AppendTag(mark, malformedField, protowire.BytesType)
	mark = protowire.AppendString(mark, err.Error())
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// malformed returns the decode error ServerCodec marked v with, or "".
func malformed(v any) (string, bool) {
	m, ok := v.(proto.Message)
	if !ok {
		return "", false
	}
	u := m.ProtoReflect().GetUnknown()
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != malformedField || typ != protowire.BytesType {
		return "", false
	}
	s, k := protowire.ConsumeString(u[n:])
	if k < 0 || n+k != len(u) {
		return "", false
	}
	return s, true
}

// RejectMalformed returns a copy of desc whose handlers answer a request
// that ServerCodec could not decode (not protobuf, truncated, a string
// that is not UTF-8) with InvalidArgument. A unary request is decoded
// inside the generated handler, before any interceptor sees it, and a
// stream's messages in RecvMsg, so the check sits around the handlers.
// Register with s.RegisterService(RejectMalformed(&pb.X_ServiceDesc), impl)
// on a server built with grpc.ForceServerCodecV2(ServerCodec()); on any
// other server it changes nothing.
func RejectMalformed(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return checkDecoded(dec(v), v) }, ic)
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		h := sd.Handler
		sd.Handler = func(srv any, ss grpc.ServerStream) error { return h(srv, decodeChecked{ss}) }
		out.Streams[i] = sd
	}
	return &out
}

// decodeChecked checks every message a stream receives.
type decodeChecked struct{ grpc.ServerStream }

func (d decodeChecked) RecvMsg(m any) error { return checkDecoded(d.ServerStream.RecvMsg(m), m) }

func checkDecoded(err error, v any) error {
	if err != nil {
		return err
	}
	if why, bad := malformed(v); bad {
		return status.Error(codes.InvalidArgument, "malformed request: "+strings.TrimPrefix(why, "proto: "))
	}
	return nil
}
