package sim_test

import (
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/sim"
)

// A Workspace started after its Egress and Resolver were updated gets
// their current revisions (network.md, UpdateEgress: "A Workspace started
// later gets the current revision"): the update admits no follow-up for
// the stopped Workspace, and the StartExecution of its next start carries
// each at revision 2 with the new spec. (A simulated node confirms no
// policy, as it runs no network, so network_policy_status is not read
// here; it is made from what the start sent, egressStatuses.)
func TestAWorkspaceStartedAfterAnEgressUpdateGetsTheCurrentRevision(t *testing.T) {
	var mu sync.Mutex
	var starts []*nodev1.StartExecution
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.OnCommand = func(_ string, op proto.Message) {
			if start, ok := op.(*nodev1.StartExecution); ok {
				mu.Lock()
				starts = append(starts, start)
				mu.Unlock()
			}
		}
	})
	first := &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: "proxy.example:1080"}
	eg, err := c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{Command: &ctrlv1.CommandMetadata{CommandId: "egress"}, Spec: first}))
	if err != nil {
		t.Fatal(err)
	}
	egressID := eg.Msg.GetEgress().GetEgressId()
	tcp := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "10.1.2.3:53"}
	r, err := c.Resolvers.CreateResolver(ctx, connect.NewRequest(&ctrlv1.CreateResolverRequest{Command: &ctrlv1.CommandMetadata{CommandId: "resolver"}, Spec: tcp}))
	if err != nil {
		t.Fatal(err)
	}
	resolverID := r.Msg.GetResolver().GetResolverId()
	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "create"}, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
			NetworkPolicy: &ctrlv1.NetworkPolicy{
				Mode:     ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
				Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"198.51.100.0/24"}}},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: resolverID,
					Path: &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}}},
			},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "stop"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)

	moved := proto.Clone(first).(*ctrlv1.EgressSpec)
	moved.Endpoint = "moved.example:1080"
	if _, err := c.Egresses.UpdateEgress(ctx, connect.NewRequest(&ctrlv1.UpdateEgressRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "move"}, EgressId: egressID, ExpectedRevision: 1, Spec: moved, DrainSeconds: 30})); err != nil {
		t.Fatal(err)
	}
	renamed := proto.Clone(tcp).(*ctrlv1.ResolverSpec)
	renamed.Address = "10.1.2.4:53"
	if _, err := c.Resolvers.UpdateResolver(ctx, connect.NewRequest(&ctrlv1.UpdateResolverRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "readdress"}, ResolverId: resolverID, ExpectedRevision: 1, Spec: renamed})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "start"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)

	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 {
		t.Fatalf("the node was sent %d StartExecutions, want the create's and the start's", len(starts))
	}
	for i, want := range []struct {
		revision         uint64
		endpoint, server string
	}{{1, first.GetEndpoint(), tcp.GetAddress()}, {2, moved.GetEndpoint(), renamed.GetAddress()}} {
		egs, rs := starts[i].GetEgresses(), starts[i].GetResolvers()
		if len(egs) != 1 || egs[0].GetRevision() != want.revision || egs[0].GetSpec().GetEndpoint() != want.endpoint ||
			len(rs) != 1 || rs[0].GetRevision() != want.revision || rs[0].GetSpec().GetAddress() != want.server {
			t.Errorf("StartExecution %d carried Egresses %v and Resolvers %v; want each at revision %d (%s, %s)", i+1, egs, rs, want.revision, want.endpoint, want.server)
		}
	}
}
