package cluster

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// reflect opens a reflection stream to addr (with a bearer token when
// given) and asks one question.
func reflect(t *testing.T, addr, token string, req *reflectionv1.ServerReflectionRequest) (*reflectionv1.ServerReflectionResponse, error) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
	if err != nil {
		return nil, err
	}
	// Send says io.EOF once the server has ended the stream (a refusal
	// may arrive first); the stream's status is what Recv returns.
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	_ = stream.CloseSend()
	return resp, err
}

func listServices(t *testing.T, addr, token string) ([]string, error) {
	resp, err := reflect(t, addr, token, &reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// What grpcurl's list and describe do: list the services, then fetch the
// file that declares LeaseService and find Acquire's request type in it.
func TestReflectionListsTheAPIAndDescribesAcquire(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.GRPCReflection = true })
	addr := tc.cfgs[0].Listen
	names, err := listServices(t, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"leasefence.v1.LeaseService", "leasefence.v1.ClusterService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("list lacks %s: %v", want, names)
		}
	}
	if slices.Contains(names, "leasefence.transport.v1.RaftTransport") {
		t.Errorf("list shows the Raft transport, which is no client's business: %v", names)
	}
	resp, err := reflect(t, addr, "", &reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "leasefence.v1.LeaseService"}})
	if err != nil {
		t.Fatal(err)
	}
	var input string
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, svc := range fd.GetService() {
			if svc.GetName() != "LeaseService" {
				continue
			}
			for _, m := range svc.GetMethod() {
				if m.GetName() == "Acquire" {
					input = m.GetInputType()
				}
			}
		}
	}
	if input != ".leasefence.v1.AcquireRequest" {
		t.Fatalf("Acquire's request type through reflection: %q", input)
	}
}

func TestReflectionIsOffUnlessConfigured(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	if _, err := listServices(t, tc.cfgs[0].Listen, ""); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection without GRPCReflection: %v, want Unimplemented", err)
	}
}

func TestReflectionWithAPolicyIsForAdministratorsOnly(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.GRPCReflection = true
		c.Policy = mustPolicy(t, testPolicy)
	})
	addr := tc.cfgs[0].Listen
	for _, tok := range []string{"", aliceToken} {
		if _, err := listServices(t, addr, tok); status.Code(err) != codes.PermissionDenied {
			t.Errorf("reflection with token %q: %v, want PermissionDenied", tok, err)
		}
	}
	if names, err := listServices(t, addr, rootToken); err != nil || !slices.Contains(names, "leasefence.v1.LeaseService") {
		t.Fatalf("reflection as an administrator: %v %v", names, err)
	}
}

// The health status follows the node: SERVING with a leader, NOT_SERVING
// once it has lost its quorum and knows no leader.
func TestHealthFollowsTheNodesState(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	conn, err := grpc.NewClient(tc.cfgs[0].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.GetStatus()
	}
	for _, svc := range []string{"", "leasefence.v1.LeaseService"} {
		eventually(t, 5*time.Second, "SERVING "+svc, func() bool { return check(svc) == healthpb.HealthCheckResponse_SERVING })
	}
	tc.stop(1)
	tc.stop(2)
	for _, svc := range []string{"", "leasefence.v1.LeaseService"} {
		eventually(t, 20*time.Second, "NOT_SERVING without a quorum "+svc, func() bool {
			return check(svc) == healthpb.HealthCheckResponse_NOT_SERVING
		})
	}
	if _, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v, want NotFound", err)
	}
}
