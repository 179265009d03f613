package client

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/leasefence/leasefence/api"
)

func withDetail(t *testing.T, c codes.Code, msg string, d protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(d)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// Each way an attempt fails is told apart: a node's own answers (from the
// server's table) from gRPC's failures to reach one.
func TestClassifyTellsAnswersFromFailuresToReachANode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want attemptKind
	}{
		{"dial refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), attemptNotSent},
		{"connection broke after sending", status.Error(codes.Unavailable, "error reading from server: EOF"), attemptBroken},
		{"attempt timed out", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), attemptBroken},
		{"no leader known", withDetail(t, codes.Unavailable, "cluster: not the leader, leader unknown", &api.NotLeader{}), attemptNoLeader},
		{"leader hint", withDetail(t, codes.Unavailable, "cluster: not the leader; leader is n2 at a:1", &api.NotLeader{LeaderId: "n2", LeaderAddr: "a:1"}), attemptAnswered},
		{"outcome unknown", withDetail(t, codes.Unavailable, "cluster: outcome unknown", &errdetails.ErrorInfo{Domain: api.ErrorDomain, Reason: api.ReasonIndeterminate}), attemptIndeterminate},
		{"node stopping", status.Error(codes.Unavailable, "cluster: node stopped"), attemptAnswered},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// A call that gives up says what it saw: outcome unknown (with the request
// id) only for a call that changes state and may have arrived; no leader
// when nodes answered; unreachable only when none did.
func TestGiveUpNamesWhatTheCallSaw(t *testing.T) {
	refused := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: connection refused\"")
	noLeader := withDetail(t, codes.Unavailable, "cluster: not the leader, leader unknown", &api.NotLeader{})
	unknown := withDetail(t, codes.Unavailable, "cluster: outcome unknown", &errdetails.ErrorInfo{
		Domain: api.ErrorDomain, Reason: api.ReasonIndeterminate, Metadata: map[string]string{api.MetaRequestID: "from-server"},
	})
	type attempt struct {
		err    error
		silent bool
	}
	cases := []struct {
		name     string
		spec     callSpec
		attempts []attempt
		want     error
		wantID   string
	}{
		{"all refused", callSpec{requestID: "r"}, []attempt{{refused, false}, {refused, false}}, ErrUnavailable, ""},
		{"all silent, a read", callSpec{}, []attempt{{context.DeadlineExceeded, true}}, ErrUnavailable, ""},
		{"all silent, a write", callSpec{requestID: "r"}, []attempt{{context.DeadlineExceeded, true}}, ErrIndeterminate, "r"},
		{"no leader", callSpec{requestID: "r"}, []attempt{{refused, false}, {noLeader, false}}, ErrNoLeader, ""},
		{"no leader after a silent node, a write", callSpec{requestID: "r"}, []attempt{{context.DeadlineExceeded, true}, {noLeader, false}}, ErrIndeterminate, "r"},
		{"no leader after a silent node, a read", callSpec{}, []attempt{{context.DeadlineExceeded, true}, {noLeader, false}}, ErrNoLeader, ""},
		{"a node said unknown", callSpec{requestID: "r"}, []attempt{{unknown, false}, {noLeader, false}}, ErrIndeterminate, "r"},
		{"a node said unknown, a read", callSpec{}, []attempt{{unknown, false}}, ErrNoLeader, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a attempts
			for _, at := range tc.attempts {
				a.add(at.err, at.silent)
			}
			err := a.giveUp(tc.spec, context.DeadlineExceeded)
			for _, s := range []error{ErrUnavailable, ErrNoLeader, ErrIndeterminate} {
				if errors.Is(err, s) != (s == tc.want) {
					t.Fatalf("giveUp = %v: errors.Is(%v) = %v", err, s, errors.Is(err, s))
				}
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("giveUp = %v does not wrap its cause", err)
			}
			var ie *IndeterminateError
			if errors.As(err, &ie) != (tc.wantID != "") || (ie != nil && ie.RequestID != tc.wantID) {
				t.Fatalf("giveUp = %#v, want request id %q", err, tc.wantID)
			}
		})
	}
}
