package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// clusterService implements api.ClusterServiceServer.
type clusterService struct {
	api.UnimplementedClusterServiceServer
	n *Node
}

// Status implements api.ClusterServiceServer from this node's local view.
func (s *clusterService) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	if _, _, err := s.n.authorize(ctx, permAny, ""); err != nil {
		return nil, toStatus(err)
	}
	n := s.n
	sendClusterID(ctx, n.ClusterID()) // for a leader's join probe

	leaderID, leaderAddr := n.Leader()
	out := &api.StatusResponse{
		Id:           n.cfg.ID,
		Addr:         n.addr,
		State:        strings.ToLower(n.raft.State().String()),
		LeaderId:     leaderID,
		LeaderAddr:   leaderAddr,
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LastLogIndex: n.raft.LastIndex(),
		SkewMarginNs: int64(n.cfg.SkewMargin),
		Drift:        n.cfg.Drift,
		TickNs:       int64(n.cfg.Tick),
		Version:      Version,
		Unsafe:       n.unsafeFeatures(),

		LeaderReady:      n.IsLeader(),
		VotesHeld:        n.tr.VotesHeld(),
		StateCheckpoints: n.sm.checks.proto(),
		StateCorrupt:     n.StateCorrupt(),
	}
	if fc := n.faultClock; fc != nil {
		out.FaultClock = &api.FaultClockStatus{Rate: fc.Rate(), WallOffsetNs: int64(fc.WallOffset())}
	}
	n.sm.read(func(st *fsm.State) {
		out.LiveLeases = uint64(st.Len())
		out.ClusterTimeNs = st.Now()
		out.TokenFloor = st.Floor()
		out.Served = st.Served()
	})
	if req.GetStateHash() {
		if h, idx, err := n.sm.stateHash(); err == nil {
			out.StateHash, out.StateHashIndex = h, idx
		}
	}
	servers, _, err := n.members()
	if err != nil {
		return nil, err
	}
	for _, srv := range servers {
		suffrage := "voter"
		if srv.Suffrage != raft.Voter {
			suffrage = "nonvoter"
		}
		out.Members = append(out.Members, &api.Member{
			Id: string(srv.ID), Addr: string(srv.Address), Suffrage: suffrage, Leader: string(srv.ID) == leaderID,
		})
	}
	return out, nil
}

// members returns raft's current configuration: its servers and the index
// a configuration change must name; a failure is a gRPC status.
func (n *Node) members() ([]raft.Server, uint64, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, 0, toStatus(n.raftError(err))
	}
	return cf.Configuration().Servers, cf.Index(), nil
}

// configWritten waits until the leader's log holds the configuration at
// index (members' index) on disk, before a change that follows it is
// proposed. raft takes a new change once the previous one is committed,
// and it counts the leader, which writes its log while it replicates
// (leaderlog.go), before that write: two changes in a row could rest on
// followers alone, and a power cut on the leader could leave the old and
// the new configuration each with a quorum of its own. Once written, the
// previous change is on a majority of the configuration before it; the
// change then names index as its previous one, so raft refuses it if
// another came in between.
func (n *Node) configWritten(ctx context.Context, index uint64) error {
	if err := n.llog.waitDurable(ctx, index); err != nil {
		return toStatus(err)
	}
	return nil
}

// changeWritten waits, after raft committed the membership change f,
// until the leader's log holds it on disk (leaderlog.go): raft reports it
// committed once the followers it counted hold it. If the wait ends first
// the change may stand: its outcome is unknown.
func (n *Node) changeWritten(ctx context.Context, f raft.IndexFuture, what string) error {
	if err := n.llog.waitDurable(ctx, f.Index()); err != nil {
		return toStatus(fmt.Errorf("%w: %s committed, not yet written to the leader's log: %v", ErrIndeterminate, what, err))
	}
	return nil
}

// adminAtLeader is the prelude the administrative calls share (Join,
// Remove, TransferLeadership, Snapshot), after each has checked its own
// request: the caller must be an administrator (authorize, permAdmin); and a node
// that does not lead forwards the call to the leader (route: it waits out
// an election up to leaderPatience; the call is marked forwarded and
// carries the caller's credentials) with forward, and relays the answer.
// local is true, with ctx carrying the caller, when this node leads and
// must serve the call itself; otherwise resp and err are the answer (a
// refusal here is already a gRPC status; forward's error is relayed as
// the leader gave it).
func adminAtLeader[T any](ctx context.Context, n *Node, forward func(context.Context, api.ClusterServiceClient) (T, error)) (_ context.Context, resp T, local bool, err error) {
	ctx, _, err = n.authorize(ctx, permAdmin, "")
	if err != nil {
		return ctx, resp, false, toStatus(err)
	}
	conn, err := n.route(ctx)
	if err != nil {
		return ctx, resp, false, toStatus(err)
	}
	if conn != nil {
		resp, err = forward(markForwarded(ctx), api.NewClusterServiceClient(conn))
		return ctx, resp, false, err
	}
	return ctx, resp, true, nil
}

// Join implements api.ClusterServiceServer: one configuration change, on
// the leader. Joining again with the same id and address is a no-op. The id
// and address are validated (ValidateNodeID, ValidatePeerAddr); the new
// member must answer the leader, and a new voter must leave a quorum of
// answering voters (checkAdd): a member that never answers would count
// against the quorum for good.
func (s *clusterService) Join(ctx context.Context, req *api.JoinRequest) (*api.JoinResponse, error) {
	if req.Id == "" || req.Addr == "" {
		return nil, toStatus(&fsm.FieldError{Field: "id/addr", Limit: "both required"})
	}
	if err := ValidateNodeID(req.Id); err != nil {
		return nil, toStatus(err)
	}
	if err := ValidatePeerAddr(req.Addr); err != nil {
		return nil, toStatus(err)
	}
	// The joining node writes the cluster id it hears into its identity
	// file, and the transport then holds every peer to it: it must be the
	// leader's, relayed by a follower that forwards the call.
	var leaderMD metadata.MD
	ctx, resp, local, err := adminAtLeader(ctx, s.n, func(ctx context.Context, c api.ClusterServiceClient) (*api.JoinResponse, error) {
		return c.Join(ctx, req, grpc.Header(&leaderMD))
	})
	if !local {
		sendClusterID(ctx, clusterID(leaderMD))
		return resp, err
	}
	sendClusterID(ctx, s.n.ClusterID())
	servers, index, err := s.n.members()
	if err != nil {
		return nil, err
	}
	if err := s.n.configWritten(ctx, index); err != nil {
		return nil, err
	}
	for _, srv := range servers {
		switch {
		case string(srv.ID) == req.Id && string(srv.Address) == req.Addr:
			return &api.JoinResponse{}, nil
		case string(srv.ID) == req.Id:
			return nil, status.Errorf(codes.FailedPrecondition, "cluster: id %s is a member at %s; remove it first", srv.ID, srv.Address)
		case string(srv.Address) == req.Addr:
			return nil, status.Errorf(codes.FailedPrecondition, "cluster: address %s belongs to member %s; remove it first", req.Addr, srv.ID)
		}
	}
	// The planted add-unprobed adds as before issue 14 §3: no probe, no
	// quorum rule.
	if !s.n.planted(BugAddUnprobed) {
		if err := s.n.checkAdd(ctx, req.Id, req.Addr, req.Nonvoter, servers); err != nil {
			s.n.log.Warn("member add refused", "member-id", req.Id, "member-addr", req.Addr, "error", err)
			return nil, err
		}
	}
	var f raft.IndexFuture
	if r := s.n.raft; req.Nonvoter {
		f = r.AddNonvoter(raft.ServerID(req.Id), raft.ServerAddress(req.Addr), index, s.n.cfg.ApplyTimeout)
	} else {
		f = r.AddVoter(raft.ServerID(req.Id), raft.ServerAddress(req.Addr), index, s.n.cfg.ApplyTimeout)
	}
	if err := f.Error(); err != nil {
		return nil, toStatus(s.n.raftError(err))
	}
	if err := s.n.changeWritten(ctx, f, "member add"); err != nil {
		return nil, err
	}
	s.n.log.Info("member added", "member-id", req.Id, "member-addr", req.Addr, "nonvoter", req.Nonvoter)
	return &api.JoinResponse{}, nil
}

// Remove implements api.ClusterServiceServer. It refuses to remove the last
// voter.
func (s *clusterService) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	if req.Id == "" {
		return nil, toStatus(&fsm.FieldError{Field: "id", Limit: "required"})
	}
	ctx, resp, local, err := adminAtLeader(ctx, s.n, func(ctx context.Context, c api.ClusterServiceClient) (*api.RemoveResponse, error) {
		return c.Remove(ctx, req)
	})
	if !local {
		return resp, err
	}
	servers, index, err := s.n.members()
	if err != nil {
		return nil, err
	}
	if err := s.n.configWritten(ctx, index); err != nil {
		return nil, err
	}
	var (
		target *raft.Server
		remain []raft.Server // voters left after the removal
	)
	for i, srv := range servers {
		if string(srv.ID) == req.Id {
			target = &servers[i]
		} else if srv.Suffrage == raft.Voter {
			remain = append(remain, srv)
		}
	}
	if target == nil {
		return nil, status.Errorf(codes.NotFound, "cluster: no member %q", req.Id)
	}
	if target.Suffrage == raft.Voter {
		if len(remain) == 0 {
			return nil, status.Error(codes.FailedPrecondition, "cluster: refusing to remove the last voter")
		}
		// The voters left must still form a quorum among themselves.
		up := 0
		for _, srv := range remain {
			if string(srv.ID) == s.n.cfg.ID || s.n.answers(ctx, string(srv.Address)) {
				up++
			}
		}
		if need := len(remain)/2 + 1; up < need {
			return nil, status.Errorf(codes.FailedPrecondition,
				"cluster: removing %s would leave %d voters of which only %d answer (a quorum needs %d); bring members back or add one first",
				req.Id, len(remain), up, need)
		}
	}
	f := s.n.raft.RemoveServer(raft.ServerID(req.Id), index, s.n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, toStatus(s.n.raftError(err))
	}
	if err := s.n.changeWritten(ctx, f, "member removal"); err != nil {
		return nil, err
	}
	s.n.log.Info("member removed", "member-id", req.Id)
	return &api.RemoveResponse{}, nil
}

// answers reports whether the node at addr answers a Status call quickly.
func (n *Node) answers(ctx context.Context, addr string) bool {
	conn, err := n.fwd.conn(addr)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{})
	// A policy that does not know this node's credentials still proves
	// the peer is up.
	return err == nil || status.Code(err) == codes.PermissionDenied
}

// TransferLeadership implements api.ClusterServiceServer.
func (s *clusterService) TransferLeadership(ctx context.Context, req *api.TransferLeadershipRequest) (*api.TransferLeadershipResponse, error) {
	_, resp, local, err := adminAtLeader(ctx, s.n, func(ctx context.Context, c api.ClusterServiceClient) (*api.TransferLeadershipResponse, error) {
		return c.TransferLeadership(ctx, req)
	})
	if !local {
		return resp, err
	}
	r := s.n.raft
	var f raft.Future
	if req.Id == "" {
		f = r.LeadershipTransfer()
	} else {
		var addr raft.ServerAddress
		servers, _, err := s.n.members()
		if err != nil {
			return nil, err
		}
		for _, srv := range servers {
			if string(srv.ID) == req.Id {
				if err := checkTransferTarget(req.Id, srv); err != nil {
					return nil, err
				}
				addr = srv.Address
			}
		}
		if addr == "" {
			return nil, status.Errorf(codes.NotFound, "cluster: no member %q", req.Id)
		}
		f = r.LeadershipTransferToServer(raft.ServerID(req.Id), addr)
	}
	if err := f.Error(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "cluster: leadership transfer: %v", err)
	}
	id, _ := s.n.Leader()
	return &api.TransferLeadershipResponse{LeaderId: id}, nil
}

// unsafeFeatures lists what weakens this node, each turned on only by an
// explicit setting: plaintext gRPC (no TLS), profiling endpoints, peer
// routes and the fault-injection clock (fault injection), and planted bugs
// (a test build).
func (n *Node) unsafeFeatures() []string {
	var out []string
	if !n.cfg.TLS.Enabled() {
		out = append(out, "insecure")
	}
	if n.cfg.Pprof {
		out = append(out, "pprof")
	}
	if len(n.cfg.Unsafe.PeerRoutes) > 0 {
		out = append(out, "peer-route")
	}
	if n.faultClock != nil {
		out = append(out, "fault-clock")
	}
	out = append(out, n.cfg.Testing.plantedList()...)
	return out
}
