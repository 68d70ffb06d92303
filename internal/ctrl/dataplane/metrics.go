package dataplane

import (
	"context"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// Metrics serves MetricsService: each call asks the node running the
// Workspace's current execution, which asks its guest (internal/node,
// sample.go; internal/guest, sample.go); nothing is stored. ctrl adds what
// it holds: the generation and the CPU limit.
type Metrics struct {
	*relay
}

var _ ctrlv1connect.MetricsServiceHandler = (*Metrics)(nil)

// Metrics is the metrics service on the same relay (see Files).
func (p *Processes) Metrics() *Metrics { return &Metrics{relay: p.relay} }

const stageMetrics = ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS

// GetWorkspaceMetrics answers one sample of the Workspace's current
// execution. Every failure names stageMetrics, a missing Workspace's too.
func (m *Metrics) GetWorkspaceMetrics(ctx context.Context, req *connect.Request[ctrlv1.GetWorkspaceMetricsRequest]) (*connect.Response[ctrlv1.GetWorkspaceMetricsResponse], error) {
	if req.Msg.GetWorkspaceId() == "" {
		return nil, stageOf(apierr.Invalid("workspace_id", "must name a Workspace"), stageMetrics)
	}
	t, err := m.guest(ctx, req.Msg.GetWorkspaceId(), stageMetrics)
	if err != nil {
		return nil, stageOf(err, stageMetrics)
	}
	res, err := t.node.SampleExecution(ctx, connect.NewRequest(&nodev1.SampleExecutionRequest{InstanceId: t.instance}))
	if err != nil {
		return nil, m.ended(stageOf(nodeMiss(err), stageMetrics), t, stageMetrics)
	}
	sample := res.Msg.GetSample()
	sample.Generation = t.workspace.GetGeneration()
	sample.CpuLimitMillis = t.workspace.GetSpec().GetResources().GetCpuMillis()
	return connect.NewResponse(&ctrlv1.GetWorkspaceMetricsResponse{Sample: sample}), nil
}

// nodeMiss makes a node's answer that it does not run the execution (or
// no longer) unavailable: ctrl holds it current, so either ctrl learns of
// its end soon (ended then says failed_precondition) or the two disagree
// for a moment. Neither is the caller's not_found.
func nodeMiss(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeFailedPrecondition:
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return err
}
