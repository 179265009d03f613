package cluster

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
	"github.com/leasefence/leasefence/fsm/fsmpb"
)

// checkKeepAlive refuses a keep-alive message the stream cannot serve: more
// renewals than a stream may have in flight, or a nested more. Such a
// message ends the stream (InvalidArgument); nothing of it is renewed.
func checkKeepAlive(req *api.KeepAliveRequest) error {
	if n := 1 + len(req.More); n > keepAliveInFlight {
		return status.Errorf(codes.InvalidArgument, "keep-alive: %d renewals in one message; at most %d", n, keepAliveInFlight)
	}
	for _, m := range req.More {
		if len(m.More) > 0 {
			return status.Error(codes.InvalidArgument, "keep-alive: a renewal in more carries more of its own")
		}
	}
	return nil
}

// renewAll renews, on the leader, every lease of one keep-alive message
// (req and req.More) exactly as Renew would each, and answers them all in
// one response (the first renewal's, the others in its More; brief if req
// is): one goroutine and one message for the lot, not one each. Every
// renewal is proposed before any is awaited, so they all join the same
// batches.
func (s *leaseService) renewAll(ctx context.Context, req *api.KeepAliveRequest) *api.KeepAliveResponse {
	reqs := make([]*api.KeepAliveRequest, 0, 1+len(req.More))
	reqs = append(append(reqs, req), req.More...)
	resps := make([]api.KeepAliveResponse, len(reqs))
	props := make([]*proposal, len(reqs))
	for i, r := range reqs {
		resp := &resps[i]
		resp.Seq, resp.LeaseId = r.Seq, r.LeaseId
		p, res, err := s.submitRenewal(ctx, r.LeaseId)
		switch {
		case err != nil:
			setRenewError(resp, r.LeaseId, err)
		case p == nil:
			setRenewed(resp, res, req.Brief)
		default:
			props[i] = p
		}
	}
	// One bound for the whole message, so a silently dropped leader
	// connection cannot stall its renewals for long: the client retries
	// or fails over.
	ctx, cancel := context.WithTimeout(ctx, keepAliveRenewTimeout)
	defer cancel()
	for i, p := range props {
		if p == nil {
			continue
		}
		res, err := s.n.awaitProposal(ctx, p)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			setRenewError(&resps[i], reqs[i].LeaseId, err)
			continue
		}
		setRenewed(&resps[i], res, req.Brief)
	}
	out := &resps[0]
	if len(resps) > 1 {
		out.More = make([]*api.KeepAliveResponse, len(resps)-1)
		for i := range out.More {
			out.More[i] = &resps[i+1]
		}
	}
	return out
}

// submitRenewal checks and authorizes a renewal of the lease id and hands
// it to the group-commit loop (proposeRenewal). It returns the proposal to
// await or, when the outcome is already known (a planted early answer),
// the result with a nil proposal.
func (s *leaseService) submitRenewal(ctx context.Context, id []byte) (*proposal, fsm.Result, error) {
	if err := fsm.ValidateLeaseID(id); err != nil {
		return nil, fsm.Result{}, err
	}
	ctx, err := s.n.authorizeLease(ctx, id)
	if err != nil {
		return nil, fsm.Result{}, err
	}
	cmd := &fsmpb.Command{Op: &fsmpb.Command_Renew{Renew: &fsmpb.Renew{LeaseId: id}}}
	if res, ok := s.ackEarly(ctx, id, cmd); ok { // planted defects only
		return nil, res, nil
	}
	p, err := s.n.proposeRenewal([fsm.LeaseIDLen]byte(id), cmd)
	return p, fsm.Result{}, err
}

// setRenewed answers a renewal with its result, as RenewResponse would;
// brief leaves the lease out.
func setRenewed(resp *api.KeepAliveResponse, res fsm.Result, brief bool) {
	if !brief {
		resp.Lease = toAPILease(res.Lease)
	}
	resp.TtlRemaining = durationpb.New(res.Remaining)
}

// keepAliveOverloaded is the message of a keep-alive renewal refused for
// overload; its retry_after says when to send it again.
var keepAliveOverloaded = ErrOverloaded.Error() + ": nothing was proposed; send it again after retry_after"

// setRenewError answers a renewal with the status a unary Renew would have
// returned for err.
func setRenewError(resp *api.KeepAliveResponse, id []byte, err error) {
	var over *OverloadedError
	switch {
	case errors.As(err, &over):
		// The common refusal under overload: no status with details to
		// build and take apart again, and one message for all (the
		// counts, formatted for each of thousands of refusals a second,
		// were a twentieth of the leader's time).
		resp.Code, resp.Message = int32(codes.ResourceExhausted), keepAliveOverloaded
		resp.RetryAfter = durationpb.New(over.RetryAfter)
		return
	}
	st := status.Convert(renewStatus(id, err))
	resp.Code, resp.Message = int32(st.Code()), st.Message()
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			resp.RetryAfter = ri.RetryDelay
		}
	}
}
