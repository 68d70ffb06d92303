package workspace_test

import (
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// Artifact progress a node reports for a starting execution shows as the
// Workspace's delivery, started_at kept from the first report; it is an
// observation and changes nothing else.
func TestDeliveryProgressIsObservedWhileCreating(t *testing.T) {
	e := sqlite(t)
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	instance := id + ".0123456789ab"
	e.ws.ExecutionProgress(ctx, "node-a", &nodev1.ExecutionProgress{InstanceId: instance, DeliveredBytes: 10, TotalBytes: 100})
	first := get(t, e, id).GetDelivery()
	e.ws.ExecutionProgress(ctx, "node-a", &nodev1.ExecutionProgress{InstanceId: instance, DeliveredBytes: 60, TotalBytes: 100})
	w := get(t, e, id)
	d := w.GetDelivery()
	switch {
	case d.GetState() != ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY || d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING:
		t.Errorf("delivery %v: want NOT_READY, DISTRIBUTING", d)
	case d.GetDeliveredBytes() != 60 || d.GetTotalBytes() != 100:
		t.Errorf("delivery %v: want 60 of 100 bytes", d)
	case !d.GetStartedAt().AsTime().Equal(first.GetStartedAt().AsTime()) || d.GetObservedAt() == nil:
		t.Errorf("delivery %v: started_at must stay %v", d, first.GetStartedAt())
	case w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || w.GetUpdatedAt().AsTime() != res.GetWorkspace().GetUpdatedAt().AsTime():
		t.Errorf("an observation changed the Workspace: %v", w)
	}
	// A report whose bytes did not move records nothing: observed_at stays
	// when they last moved (a delivery whose bytes stand still reads stuck
	// after a while; TestADeliveryWhoseBytesStoodStillReadsStuck).
	e.ws.ExecutionProgress(ctx, "node-a", &nodev1.ExecutionProgress{InstanceId: instance, DeliveredBytes: 60, TotalBytes: 100})
	if again := get(t, e, id).GetDelivery(); !again.GetObservedAt().AsTime().Equal(d.GetObservedAt().AsTime()) {
		t.Errorf("a report of the same bytes moved observed_at from %v to %v", d.GetObservedAt().AsTime(), again.GetObservedAt().AsTime())
	}
	// A report for a Workspace that is not starting is late: ignored.
	e.ws.ExecutionProgress(ctx, "node-a", &nodev1.ExecutionProgress{InstanceId: "ws-none.0123", DeliveredBytes: 1, TotalBytes: 2})
}

func get(t *testing.T, e *env, id string) *ctrlv1.Workspace {
	t.Helper()
	res, err := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetWorkspace()
}
