// Package fencegrpc carries fencing tokens over gRPC and enforces them in
// a server interceptor.
//
// A token travels as two metadata entries: "fencing-scope" (the scope, with
// bytes outside printable ASCII as %XX, see fence.EscapeScope) and
// "fencing-token" (decimal). A fenced call without them fails with
// InvalidArgument; a stale one with FailedPrecondition and an
// errdetails.ErrorInfo whose reason is STALE_TOKEN (see ToStatus).
//
// Server:
//
//	guard := fence.NewMemory(fence.AtLeast) // or a fencebolt guard
//	srv := grpc.NewServer(grpc.UnaryInterceptor(fencegrpc.UnaryServerInterceptor(fencegrpc.WithGuard(guard))))
//
// Client:
//
//	conn, _ := grpc.NewClient(addr, grpc.WithUnaryInterceptor(fencegrpc.UnaryClientInterceptor()), ...)
//	ctx = fence.NewContext(ctx, fence.TokenOf(lease)) // every call under ctx carries the token
package fencegrpc

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/internal/recorded"
)

// Metadata keys of a token.
const (
	MetadataScope = "fencing-scope"
	MetadataToken = "fencing-token"
)

// TokenFromIncoming reads the token of an incoming call. No token at all is
// fence.ErrNoToken; half a token, repeated entries or an unusable value
// wrap fence.ErrMalformedToken.
func TokenFromIncoming(ctx context.Context) (fence.Token, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	scopes, tokens := md.Get(MetadataScope), md.Get(MetadataToken)
	switch {
	case len(scopes) == 0 && len(tokens) == 0:
		return fence.Token{}, fence.ErrNoToken
	case len(scopes) != 1 || len(tokens) != 1:
		return fence.Token{}, malformed("want exactly one %s and one %s entry, got %d and %d", MetadataScope, MetadataToken, len(scopes), len(tokens))
	}
	scope, err := fence.UnescapeScope(scopes[0])
	if err != nil {
		return fence.Token{}, err
	}
	return fence.ParseParts(scope, tokens[0])
}

// AppendToOutgoing returns ctx with tok added to the outgoing metadata, for
// calls made without UnaryClientInterceptor.
func AppendToOutgoing(ctx context.Context, tok fence.Token) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetadataScope, fence.EscapeScope(tok.Scope), MetadataToken, strconv.FormatUint(tok.Value, 10))
}

type options struct {
	guard  fence.Guard
	fenced func(fullMethod string) bool
}

// Option configures the server interceptors.
type Option func(*options)

// WithGuard makes the interceptor enforce tokens itself: the handler runs
// inside guard.Do, so it runs only for an admitted token, and the token is
// recorded whenever the handler ran, whatever it returned, and also when it
// panicked (the panic then goes on with the same value once the token is
// recorded, to a recovery interceptor outside this one): the interceptor
// cannot tell whether the handler applied an effect before it failed, and
// an effect under an unrecorded token would let an older holder in after
// it. The record is not atomic with the handler's effect; where that
// matters, use a guard inside the handler's own transaction. Without a
// guard the interceptor only requires a well-formed token and hands it to
// the handler (through fence.FromContext) for a guard that works inside the
// handler's own transaction (fencebolt, fencesql).
func WithGuard(g fence.Guard) Option { return func(o *options) { o.guard = g } }

// ForMethods limits fencing to the methods for which fenced returns true
// (full method names, "/pkg.Service/Method"); other calls pass untouched.
// By default every method is fenced.
func ForMethods(fenced func(fullMethod string) bool) Option {
	return func(o *options) { o.fenced = fenced }
}

func build(opts []Option) options {
	o := options{fenced: func(string) bool { return true }}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// UnaryServerInterceptor requires a token on every fenced call: missing or
// malformed → InvalidArgument, stale → FailedPrecondition/STALE_TOKEN (see
// ToStatus). The handler finds the token with fence.FromContext, and any
// fence error it returns is mapped the same way.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	o := build(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !o.fenced(info.FullMethod) {
			return handler(ctx, req)
		}
		tok, err := TokenFromIncoming(ctx)
		if err != nil {
			return nil, ToStatus(err)
		}
		ctx = fence.NewContext(ctx, tok)
		if o.guard == nil {
			resp, err := handler(ctx, req)
			return resp, ToStatus(err)
		}
		// The token is recorded whenever the handler ran, whatever it
		// returned, even if it panicked: a handler may apply its effect and
		// then fail, and an effect under an unrecorded token would let an
		// older holder in after it (see WithGuard).
		var (
			resp any
			herr error
		)
		ran, err := recorded.Run(ctx, o.guard, tok, func(ctx context.Context) {
			resp, herr = handler(ctx, req)
		})
		if ran && err == nil {
			err = herr
		}
		return resp, ToStatus(err)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the token
// is checked when the stream opens and, with a guard, recorded once the
// handler ran, whatever it returned, and also when it panicked (the panic
// then goes on with the same value). The guard's scope is held for the
// stream's whole life.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	o := build(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !o.fenced(info.FullMethod) {
			return handler(srv, ss)
		}
		tok, err := TokenFromIncoming(ss.Context())
		if err != nil {
			return ToStatus(err)
		}
		ctx := fence.NewContext(ss.Context(), tok)
		wrapped := &tokenStream{ServerStream: ss, ctx: ctx}
		if o.guard == nil {
			return ToStatus(handler(srv, wrapped))
		}
		var herr error
		ran, err := recorded.Run(ctx, o.guard, tok, func(ctx context.Context) {
			wrapped.ctx = ctx
			herr = handler(srv, wrapped)
		})
		if ran && err == nil {
			err = herr
		}
		return ToStatus(err)
	}
}

type tokenStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tokenStream) Context() context.Context { return s.ctx }

// UnaryClientInterceptor sends the token found in the call's context
// (fence.NewContext) as metadata, and turns fence statuses in replies back
// into fence errors (FromStatus): errors.Is(err, fence.ErrStaleToken) holds
// for a stale reply while status.Code(err) still reports
// FailedPrecondition. Calls without a token in their context are sent as
// they are.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tok, ok := fence.FromContext(ctx); ok {
			ctx = AppendToOutgoing(ctx, tok)
		}
		return FromStatus(invoker(ctx, method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor sends the context's token when a stream opens.
// Errors of the stream itself (RecvMsg) are left as gRPC statuses: pass
// them through FromStatus to test them with errors.Is.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if tok, ok := fence.FromContext(ctx); ok {
			ctx = AppendToOutgoing(ctx, tok)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		return cs, FromStatus(err)
	}
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", fence.ErrMalformedToken, fmt.Sprintf(format, args...))
}
