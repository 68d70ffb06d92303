package sim_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/testenv"
)

// WorkspaceSpec.delivery: a start whose node reports its artifacts
// arriving shows that delivery while it starts; "It is absent once the
// Workspace is available". A start that fails with its delivery present
// leaves the delivery TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED, with
// the failure's message.
func TestADeliveryEndsWithItsStart(t *testing.T) {
	var refuse atomic.Bool // the node refuses every start
	var once sync.Once
	reached, release := make(chan struct{}), make(chan struct{})
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.Delivery = func(string, *nodev1.StartExecution) (uint64, uint64) { return 10, 100 }
		cfg.OnCommand = func(_ string, op proto.Message) {
			if _, ok := op.(*nodev1.StartExecution); ok {
				once.Do(func() { close(reached); <-release })
			}
		}
		cfg.Refuse = func(_ string, op proto.Message) error {
			if _, ok := op.(*nodev1.StartExecution); ok && refuse.Load() {
				return errors.New("the artifacts could not be fetched")
			}
			return nil
		}
	})
	id := createWithoutVolume(t, c, "create")
	<-reached // the node reported the delivery and holds the start
	var w *ctrlv1.Workspace
	testenv.WaitFor(t, "the delivery observed", func() bool {
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			t.Fatal(err)
		}
		w = res.Msg.GetWorkspace()
		return w.GetDelivery() != nil
	})
	if d := w.GetDelivery(); d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING || d.GetDeliveredBytes() != 10 || d.GetTotalBytes() != 100 {
		t.Errorf("the delivery while starting: %v, want DISTRIBUTING, 10 of 100 bytes", d)
	}
	close(release)
	if d := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetDelivery(); d != nil {
		t.Errorf("the delivery once AVAILABLE: %v, want none", d)
	}

	refuse.Store(true)
	failing := createWithoutVolume(t, c, "create-failing")
	res, err := c.Workspaces.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{WorkspaceId: failing, CommandId: "create-failing", Timeout: durationpb.New(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	w = res.Msg.GetWorkspace()
	if d := w.GetDelivery(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED ||
		d.GetMessage() != w.GetFailure().GetMessage() || d.GetMessage() == "" {
		t.Errorf("a start that failed with its delivery present: %v, delivery %v, failure %v; want FAILED, PREPARATION_FAILED with the failure's message", w.GetState(), d, w.GetFailure())
	}
}
