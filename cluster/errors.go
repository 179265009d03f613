package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/authz"
	"github.com/leasefence/leasefence/fsm"
)

// Errors of the node. Domain errors come from package fsm.
var (
	// ErrNoLeader is returned when no leader is known within the call's
	// patience (an election is under way or quorum is lost).
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrIndeterminate is returned when a command was handed to Raft but
	// its outcome is unknown (leadership lost or the node stopped before it
	// committed). The command may or may not take effect: retry with the
	// same request id.
	ErrIndeterminate = errors.New("cluster: outcome unknown")
	// ErrStopped is returned by a node that is shutting down.
	ErrStopped = errors.New("cluster: node stopped")
	// ErrFailed is returned after the node met a log entry it cannot apply.
	ErrFailed = errors.New("cluster: node failed")
	// ErrPermissionDenied is returned when a policy is on and the caller
	// is unknown or may not do what it asked (codes.PermissionDenied).
	ErrPermissionDenied = authz.ErrPermissionDenied
	// ErrLimit is returned when a call would pass one of the node's
	// documented maximums (waiters per resource, watchers per client,
	// leases per identity); nothing was written (codes.ResourceExhausted).
	ErrLimit = errors.New("cluster: limit reached")
	// ErrOverloaded is returned when the leader's admission budget for a
	// command's class is spent (Config.MaxPending, MaxPendingGrants):
	// nothing was proposed; send it again after the *OverloadedError's
	// RetryAfter (codes.ResourceExhausted, reason OVERLOADED, RetryInfo).
	ErrOverloaded = errors.New("cluster: overloaded")
)

// OverloadedError is ErrOverloaded with the hint a caller should honour.
type OverloadedError struct {
	Pending, Limit int           // commands pending when refused, and the class's budget
	RetryAfter     time.Duration // about how long the admitted queue takes to drain
}

func (e *OverloadedError) Error() string {
	return fmt.Sprintf("%v: %d commands pending (limit %d for this kind); nothing was proposed, retry after %v",
		ErrOverloaded, e.Pending, e.Limit, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadedError) Unwrap() error { return ErrOverloaded }

// NotLeaderError says that this node is not the leader and names the one
// it knows, if any.
type NotLeaderError struct {
	ID   string
	Addr string
}

func (e *NotLeaderError) Error() string {
	if e.Addr == "" {
		return "cluster: not the leader, leader unknown"
	}
	return fmt.Sprintf("cluster: not the leader; leader is %s at %s", e.ID, e.Addr)
}

// Is makes errors.Is(err, ErrNoLeader) true when the leader is unknown.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNoLeader && e.Addr == "" }

// IndeterminateError is ErrIndeterminate with the request id the caller
// may retry with (empty when its call carried none). It is returned when a
// command reached Raft without an outcome, and when a forwarded call that
// may not be resent went unanswered by a leader that may still apply it.
type IndeterminateError struct {
	RequestID string
	Err       error // what happened
}

func (e *IndeterminateError) Error() string {
	msg := e.Err.Error()
	if !errors.Is(e.Err, ErrIndeterminate) {
		msg = fmt.Sprintf("%v: %s", ErrIndeterminate, msg)
	}
	if e.RequestID != "" {
		msg += fmt.Sprintf(" (retry with request id %q)", e.RequestID)
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrIndeterminate) true, and exposes Err.
func (e *IndeterminateError) Unwrap() []error { return []error{ErrIndeterminate, e.Err} }

// raftError classifies an error of a Raft future: definite failures (the
// command never entered the log) become *NotLeaderError; anything after
// the command may have entered the log becomes ErrIndeterminate.
func (n *Node) raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrEnqueueTimeout):
		return n.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", ErrIndeterminate, ErrStopped)
	default:
		return fmt.Errorf("%w: %v", ErrIndeterminate, err)
	}
}

func (n *Node) notLeader() *NotLeaderError {
	addr, id := n.raft.LeaderWithID()
	return &NotLeaderError{ID: string(id), Addr: string(addr)}
}

// toStatus is the one table from domain and node errors to gRPC statuses.
// The client's inverse lives in package client.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	// Already a status (e.g. from a forwarded call): as it is. Not
	// status.FromError, which for every other error builds an Unknown
	// status from err.Error() first, a cost each refusal would pay.
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) && st.GRPCStatus() != nil {
		return err
	}
	var (
		field *fsm.FieldError
		held  *fsm.HeldError
		ended *fsm.EndedError
		nl    *NotLeaderError
		over  *OverloadedError
	)
	switch {
	case errors.As(err, &field):
		return withDetail(codes.InvalidArgument, err, &api.BadField{Field: field.Field, Limit: field.Limit})
	case errors.Is(err, fsm.ErrRequestIDReused):
		return withDetail(codes.InvalidArgument, err, &api.BadField{Field: "request_id",
			Limit: "names one request: a retry must carry the same resource, scope, holder, ttl and wait"})
	case errors.As(err, &ended):
		// A replayed grant whose lease has ended: the caller holds nothing.
		return withDetail(codes.NotFound, err, &errdetails.ErrorInfo{
			Reason: api.ReasonLeaseEnded, Domain: api.ErrorDomain,
			Metadata: map[string]string{
				api.MetaRequestID: ended.RequestID,
				"lease_id":        api.FormatLeaseID(ended.Lease.ID[:]),
				"resource":        ended.Lease.Resource,
				"scope":           ended.Lease.Scope,
				"token":           fmt.Sprint(ended.Lease.Token),
			},
		})
	case errors.As(err, &held):
		return withDetail(codes.FailedPrecondition, err, &api.ResourceHeld{
			Resource: held.Resource, Holder: held.Holder, Token: held.Token, TimeLeft: durationpb.New(held.TimeLeft),
		})
	case errors.Is(err, fsm.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.As(err, &nl):
		return withDetail(codes.Unavailable, err, &api.NotLeader{LeaderId: nl.ID, LeaderAddr: nl.Addr})
	case errors.Is(err, ErrIndeterminate):
		info := &errdetails.ErrorInfo{Reason: api.ReasonIndeterminate, Domain: api.ErrorDomain}
		var ie *IndeterminateError
		if errors.As(err, &ie) && ie.RequestID != "" {
			info.Metadata = map[string]string{api.MetaRequestID: ie.RequestID}
		}
		return withDetail(codes.Unavailable, err, info)
	case errors.Is(err, ErrNoLeader), errors.Is(err, ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.As(err, &over):
		st, derr := status.New(codes.ResourceExhausted, err.Error()).WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(over.RetryAfter)},
			&errdetails.ErrorInfo{Reason: api.ReasonOverloaded, Domain: api.ErrorDomain})
		if derr != nil {
			return status.Error(codes.ResourceExhausted, err.Error())
		}
		return st.Err()
	case errors.Is(err, ErrLimit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, ErrFailed):
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func withDetail(c codes.Code, err error, detail protoadapt.MessageV1) error {
	st, derr := status.New(c, err.Error()).WithDetails(detail)
	if derr != nil {
		return status.Error(c, err.Error())
	}
	return st.Err()
}
