package cli

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

// devCPUOvercommit is the CPU ratio kibotos dev gives its node, in
// thousandths: 8x. A Workspace the CLI or an SDK creates asks for one
// vCPU, and at the cluster's default of 1x a 2-vCPU machine refused its
// third (RESOURCE_EXHAUSTED at PLACING). A development machine's guests
// mostly wait, and vCPUs are time-shared, so dev counts CPU eight times
// over; memory stays at 1x, the bound a guest cannot share.
const devCPUOvercommit = 8000

// ensureDevOvercommit sets the dev node's CPU override at its first start
// (the start that enrolled it), so an operator's later change or removal
// (`kibotos overcommit set-node`) is kept by later starts.
// A CPU override already there is kept; a memory override is sent again,
// since SetNodeOvercommit clears what it leaves out.
func ensureDevOvercommit(ctx context.Context, c clientconfig.Config, nodeID string) error {
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, c.OperatorEndpoint, connect.WithInterceptors(bearer(c.OperatorToken)))
	got, err := client.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: nodeID}))
	if err != nil {
		return fmt.Errorf("node %s: %w", nodeID, err)
	}
	r := got.Msg.GetRegistration()
	if r.GetOvercommit().GetCpu().GetSource() == operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE {
		return nil
	}
	req := &operatorv1.SetNodeOvercommitRequest{
		Command: newCommandMetadata(""), NodeId: nodeID, ExpectedRegistrationVersion: r.GetRegistrationVersion(),
		CpuThousandths: proto.Uint32(devCPUOvercommit),
	}
	if m := r.GetOvercommit().GetMemory(); m.GetSource() == operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE {
		req.MemoryThousandths = proto.Uint32(m.GetThousandths())
	}
	if _, err := client.SetNodeOvercommit(ctx, connect.NewRequest(req)); err != nil {
		return fmt.Errorf("CPU overcommit of node %s: %w", nodeID, err)
	}
	return nil
}
