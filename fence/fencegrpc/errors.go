package fencegrpc

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/fence"
)

// Reasons of the errdetails.ErrorInfo attached to fence statuses, and its
// domain.
const (
	// ReasonStaleToken marks FailedPrecondition caused by a stale token;
	// metadata "scope", "presented" and "highest" carry the numbers.
	ReasonStaleToken = "STALE_TOKEN"
	// ReasonMissingToken marks InvalidArgument for a call without a token.
	ReasonMissingToken = "MISSING_FENCING_TOKEN"
	// ReasonMalformedToken marks InvalidArgument for an unusable token.
	ReasonMalformedToken = "MALFORMED_FENCING_TOKEN"
	// Domain is the ErrorInfo domain of every fence status.
	Domain = "fence.leasefence"
)

// ToStatus is the one table from fence errors to gRPC statuses:
//
//	*fence.StaleTokenError   FailedPrecondition, ErrorInfo{STALE_TOKEN, scope, presented, highest}
//	fence.ErrNoToken         InvalidArgument, ErrorInfo{MISSING_FENCING_TOKEN}
//	fence.ErrMalformedToken  InvalidArgument, ErrorInfo{MALFORMED_FENCING_TOKEN}
//
// A context error becomes Canceled or DeadlineExceeded. Any other error,
// including nil and errors that already carry a status, is returned
// unchanged. FromStatus is its inverse on the client side.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	var st *fence.StaleTokenError
	switch {
	case errors.As(err, &st):
		return withInfo(codes.FailedPrecondition, err, ReasonStaleToken, map[string]string{
			"scope":     st.Scope,
			"presented": strconv.FormatUint(st.Presented, 10),
			"highest":   strconv.FormatUint(st.Highest, 10),
		})
	case errors.Is(err, fence.ErrNoToken):
		return withInfo(codes.InvalidArgument, err, ReasonMissingToken, nil)
	case errors.Is(err, fence.ErrMalformedToken):
		return withInfo(codes.InvalidArgument, err, ReasonMalformedToken, nil)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// e.g. the call ended while waiting for its scope in a guard
		return status.FromContextError(err).Err()
	}
	return err
}

func withInfo(c codes.Code, err error, reason string, md map[string]string) error {
	s, derr := status.New(c, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: md})
	if derr != nil {
		return status.Error(c, err.Error())
	}
	return &statusError{st: s, cause: err}
}

// statusError is a gRPC status that also unwraps to the fence error it
// stands for, so that both status.Code(err) and errors.Is(err,
// fence.ErrStaleToken) work on either side of the wire.
type statusError struct {
	st    *status.Status
	cause error
}

func (e *statusError) Error() string              { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Unwrap() error              { return e.cause }

// FromStatus turns a status made by ToStatus back into an error that
// unwraps to the fence error (a *fence.StaleTokenError, fence.ErrNoToken or
// fence.ErrMalformedToken) and still carries the status. Other errors come
// back unchanged.
func FromStatus(err error) error {
	s, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range s.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		var cause error
		switch {
		case info.GetReason() == ReasonStaleToken && s.Code() == codes.FailedPrecondition:
			md := info.GetMetadata()
			p, err1 := strconv.ParseUint(md["presented"], 10, 64)
			h, err2 := strconv.ParseUint(md["highest"], 10, 64)
			if err1 != nil || err2 != nil {
				return err
			}
			cause = &fence.StaleTokenError{Scope: md["scope"], Presented: p, Highest: h}
		case info.GetReason() == ReasonMissingToken && s.Code() == codes.InvalidArgument:
			cause = fence.ErrNoToken
		case info.GetReason() == ReasonMalformedToken && s.Code() == codes.InvalidArgument:
			cause = fence.ErrMalformedToken
		default:
			continue
		}
		return &statusError{st: s, cause: cause}
	}
	return err
}
