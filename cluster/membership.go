package cluster

import (
	"context"

	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasefence/leasefence/api"
	"github.com/leasefence/leasefence/fsm"
)

// MaxNodeIDLen bounds a node id, in bytes.
const MaxNodeIDLen = 128

// ValidateNodeID checks a node id: 1..MaxNodeIDLen bytes of text as a
// resource name allows (UTF-8, no control, bidi or zero-width characters),
// with no spaces, ',' or '=' (the bootstrap list's separators). It is
// checked at start (Config.Validate) and for every member added (Join).
func ValidateNodeID(id string) error {
	if len(id) > MaxNodeIDLen {
		return &fsm.FieldError{Field: "id", Limit: "at most " + strconv.Itoa(MaxNodeIDLen) + " bytes"}
	}
	if err := fsm.ValidateNewName("id", id); err != nil {
		return err
	}
	if strings.ContainsAny(id, ",= \t\n\r\v\f\u0085\u00a0") {
		return &fsm.FieldError{Field: "id", Limit: "must not contain spaces, ',' or '='"}
	}
	return nil
}

// ValidatePeerAddr checks a member's address: host:port, a host of at most
// 253 bytes without spaces or control characters, a port in 1..65535.
func ValidatePeerAddr(addr string) error {
	bad := func(limit string) error { return &fsm.FieldError{Field: "addr", Limit: limit} }
	if len(addr) > 253+1+5+2 { // host, ':', port, brackets
		return bad("at most 261 bytes")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return bad("must be host:port")
	}
	if strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return bad("host must not contain spaces or control characters")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return bad("port must be a number in 1..65535")
	}
	return nil
}

// joinProbeTimeout bounds how long the leader waits for a member it is
// asked to add to answer.
const joinProbeTimeout = 2 * time.Second

// probe asks the node at addr for its Status (statusOf), waiting for the
// connection up to joinProbeTimeout, and returns its answer and the cluster
// id it sent in the answer's header ("" before it joined one). A
// PermissionDenied answer (a policy that does not know this node's
// credentials) still proves the node is up; then both are empty.
func (n *Node) probe(ctx context.Context, addr string) (*api.StatusResponse, string, error) {
	var md metadata.MD
	st, err := n.statusOf(ctx, addr, joinProbeTimeout, grpc.WaitForReady(true), grpc.Header(&md))
	if status.Code(err) == codes.PermissionDenied {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return st, clusterID(md), nil
}

// statusOf asks the node at addr (through its peer route, if any) for its
// Status within timeout, on a connection of its own that is closed
// afterwards (a refused address leaves nothing behind). The join probe
// and the status page ask through it.
func (n *Node) statusOf(ctx context.Context, addr string, timeout time.Duration, opts ...grpc.CallOption) (*api.StatusResponse, error) {
	dial := addr
	if via, ok := n.fwd.routes[addr]; ok {
		dial = via
	}
	conn, err := grpc.NewClient(dial, n.fwd.opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return api.NewClusterServiceClient(conn).Status(ctx, &api.StatusRequest{}, opts...)
}

// checkAdd decides, on the leader, whether adding the member id at addr
// keeps the cluster able to work: the new member must answer (a voter
// that does not answer counts against the quorum at once and, added a few
// times, leaves the cluster without one for good), and after adding a
// voter the voters that answer must still form a quorum of the new
// configuration. servers is the current configuration.
func (n *Node) checkAdd(ctx context.Context, id, addr string, nonvoter bool, servers []raft.Server) error {
	st, cluster, err := n.probe(ctx, addr)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition,
			"cluster: %s at %s does not answer (%v): start it (leased --join) before adding it, and check that the leader can reach that address", id, addr, status.Convert(err).Message())
	}
	// The node answering must be the one named, not of another cluster:
	// one would refuse every Raft RPC of this cluster, a member that never
	// answers.
	if st != nil && st.GetId() != id {
		return status.Errorf(codes.FailedPrecondition, "cluster: the node at %s is %q, not %q: check the address", addr, st.GetId(), id)
	}
	if mine := n.ClusterID(); cluster != "" && mine != "" && cluster != mine {
		return status.Errorf(codes.FailedPrecondition,
			"cluster: %s at %s belongs to cluster %s, this one is %s: a member of another cluster cannot join (empty its data dir and start it with --join)", id, addr, cluster, mine)
	}
	if nonvoter {
		return nil
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		voters int
		up     = 1 // the new member
	)
	for _, srv := range servers {
		if srv.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(srv.ID) == n.cfg.ID {
			mu.Lock() // probes started for earlier voters count too
			up++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			if n.answers(ctx, addr) {
				mu.Lock()
				up++
				mu.Unlock()
			}
		}(string(srv.Address))
	}
	wg.Wait()
	if need := (voters+1)/2 + 1; up < need {
		return status.Errorf(codes.FailedPrecondition,
			"cluster: adding voter %s would make %d voters of which only %d answer (a quorum needs %d); bring members back or remove dead ones first",
			id, voters+1, up, need)
	}
	return nil
}

// checkTransferTarget refuses a leadership transfer to a member that
// cannot lead.
func checkTransferTarget(id string, srv raft.Server) error {
	if srv.Suffrage != raft.Voter {
		return status.Errorf(codes.FailedPrecondition, "cluster: %s is a non-voter; leadership can go only to a voter", id)
	}
	return nil
}
