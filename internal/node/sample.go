package node

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// sampleTimeout bounds the guest's answer to a sample: a guest that does
// not answer a Ping in probeTimeout is not responding either.
var sampleTimeout = probeTimeout

// nodeData serves NodeDataService on the data endpoint (dataplane.go
// checks the data token first).
type nodeData struct {
	nodev1connect.UnimplementedNodeDataServiceHandler
	a *agent
}

// SampleExecution asks the guest for its part of the sample and adds the
// host's: the time on this host's clock, read once the guest answered,
// and the network attachment's counters.
func (d nodeData) SampleExecution(ctx context.Context, req *connect.Request[nodev1.SampleExecutionRequest]) (*connect.Response[nodev1.SampleExecutionResponse], error) {
	inst, att, err := d.a.vms.runningWithNetwork(req.Msg.GetInstanceId())
	if err != nil {
		return nil, err
	}
	guestCtx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	res, err := vm.Agent(inst).Sample(guestCtx, connect.NewRequest(&guestv1.SampleRequest{}))
	if err != nil {
		if guestCtx.Err() != nil && ctx.Err() == nil {
			// The guest's silence, not the caller's deadline.
			return nil, codedf(connect.CodeUnavailable, "the guest agent of %s did not answer within %s", req.Msg.GetInstanceId(), sampleTimeout)
		}
		return nil, err
	}
	sample := res.Msg.GetSample()
	sample.SampledAt = timestamppb.New(time.Now())
	if att != nil {
		c := att.Counters()
		sample.NetworkReceivedBytes, sample.NetworkSentBytes = c.Received, c.Sent
	}
	return connect.NewResponse(&nodev1.SampleExecutionResponse{Sample: sample}), nil
}
