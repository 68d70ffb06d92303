package catalog_test

import (
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

const (
	notReady = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY
	ready    = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_READY
	unknown  = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_UNKNOWN
	noReason = ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_UNSPECIFIED
	stale    = ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_OBSERVATION_STALE
)

func delivery(t *testing.T, c clients, req *operatorv1.GetTemplateDeliveryRequest) *operatorv1.GetTemplateDeliveryResponse {
	t.Helper()
	res, err := c.templates.GetTemplateDelivery(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg
}

// nodeDelivery reads one node's delivery of busybox's default revision.
func nodeDelivery(t *testing.T, c clients, node string) *ctrlv1.TemplateDeliveryObservation {
	t.Helper()
	res := delivery(t, c, &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox"}, NodeId: node})
	if len(res.GetDeliveries()) != 1 || res.GetDeliveries()[0].GetNodeId() != node {
		t.Fatalf("reading node %s answered %v", node, res.GetDeliveries())
	}
	return res.GetDeliveries()[0].GetObservation()
}

func wantDelivery(t *testing.T, node string, o *ctrlv1.TemplateDeliveryObservation, state ctrlv1.TemplateDeliveryState, reason ctrlv1.TemplateDeliveryReason, delivered, total uint64) {
	t.Helper()
	if o.GetState() != state || o.GetReason() != reason || o.GetDeliveredBytes() != delivered || o.GetTotalBytes() != total {
		t.Errorf("node %s: delivery %v, want %v %v with %d of %d bytes", node, o, state, reason, delivered, total)
	}
}

// GetTemplateDelivery reads what nodes reported of their artifact caches:
// nothing before a start needs the image, the whole image on the node a
// start fetched it to, UNKNOWN on a node whose session is down. Its counts
// cover every admitted node whatever the page.
func TestTemplateDeliveryFollowsWhatNodesReport(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			dsn := b.DSN(t)
			env := testenv.New(t, testenv.FastFleet(), func(cfg *ctrl.Config) { cfg.Database = dsn })
			c := clientsOf(env)
			a := env.StartNode(t, "node-a", "", "")
			env.StartNode(t, "node-b", "", a.PoolDir) // the same pool "default": placement takes node-a first
			later := env.StartNode(t, "node-c", "", a.PoolDir)
			env.UnbootableCatalog(t)
			rev, err := c.templates.GetTemplateRevision(context.Background(), connect.NewRequest(&operatorv1.GetTemplateRevisionRequest{
				Selector: &ctrlv1.TemplateSelector{Template: "busybox"},
			}))
			if err != nil {
				t.Fatal(err)
			}
			image := rev.Msg.GetRevision()

			before := delivery(t, c, &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox"}})
			if got, want := before.GetRef(), image.GetRef(); got.GetTemplate() != want.GetTemplate() || got.GetRevision() != want.GetRevision() {
				t.Errorf("ref %v, want the default revision %v", got, want)
			}
			if len(before.GetDeliveries()) != 3 || before.GetReadyNodeCount() != 0 || before.GetNotReadyNodeCount() != 3 {
				t.Errorf("before any start: %v, want 3 nodes, none ready", before)
			}
			for _, d := range before.GetDeliveries() {
				wantDelivery(t, d.GetNodeId(), d.GetObservation(), notReady, noReason, 0, 0)
			}

			// The start fetches the image to node-a, which cannot boot it.
			_, err = env.Workspaces.CreateWorkspace(context.Background(), connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
				Command: cmd("create-1"),
				Spec:    &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, "node-a to report the image", func() bool {
				return nodeDelivery(t, c, "node-a").GetState() == ready
			})
			size := image.GetImageSizeBytes()
			wantDelivery(t, "node-a", nodeDelivery(t, c, "node-a"), ready, noReason, size, size)
			wantDelivery(t, "node-b", nodeDelivery(t, c, "node-b"), notReady, noReason, 0, 0)

			var seen []string
			req := &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox", Revision: image.GetRef().GetRevision()}, PageSize: 1}
			for {
				p := delivery(t, c, req)
				if len(p.GetDeliveries()) != 1 || p.GetReadyNodeCount() != 1 || p.GetNotReadyNodeCount() != 2 {
					t.Fatalf("a page of 1: %v, want one node and the counts of all three", p)
				}
				seen = append(seen, p.GetDeliveries()[0].GetNodeId())
				if p.GetNextPageToken() == "" {
					break
				}
				req.PageToken = p.GetNextPageToken()
			}
			if want := []string{"node-a", "node-b", "node-c"}; !slices.Equal(seen, want) {
				t.Errorf("pages of 1 gave %v, want %v", seen, want)
			}

			later.Stop(t)
			env.WaitStatus(t, "node-c", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
			wantDelivery(t, "node-c", nodeDelivery(t, c, "node-c"), unknown, stale, 0, 0)
			if all := delivery(t, c, &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox"}}); all.GetReadyNodeCount() != 1 || all.GetNotReadyNodeCount() != 2 {
				t.Errorf("with node-c stale: %d ready, %d not, want 1 and 2", all.GetReadyNodeCount(), all.GetNotReadyNodeCount())
			}
		})
	}
}

// A bad selector or node is answered as the other catalog reads answer:
// a name nothing can have is invalid_argument naming the field, one that
// names nothing is not_found.
func TestTemplateDeliveryRefusesBadSelectorsAndUnknownNodes(t *testing.T) {
	env := testenv.New(t, testenv.FastFleet())
	c := clientsOf(env)
	env.StartNode(t, "node-a", "", "")
	env.UnbootableCatalog(t)
	busybox := &ctrlv1.TemplateSelector{Template: "busybox"}
	for _, tc := range []struct {
		what  string
		req   *operatorv1.GetTemplateDeliveryRequest
		code  connect.Code
		field string
	}{
		{"an unknown Template", &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "nope"}}, connect.CodeNotFound, ""},
		{"an unknown revision", &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox", Revision: "nope"}}, connect.CodeNotFound, ""},
		{"a malformed Template name", &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "Bad!"}}, connect.CodeInvalidArgument, "selector.template"},
		{"a malformed revision name", &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "busybox", Revision: "Bad!"}}, connect.CodeInvalidArgument, "selector.revision"},
		{"a node that never enrolled", &operatorv1.GetTemplateDeliveryRequest{Selector: busybox, NodeId: "node-never"}, connect.CodeNotFound, ""},
		{"a malformed node_id", &operatorv1.GetTemplateDeliveryRequest{Selector: busybox, NodeId: "Node_A"}, connect.CodeInvalidArgument, "node_id"},
		{"a page token of another list", &operatorv1.GetTemplateDeliveryRequest{Selector: busybox, PageToken: "junk"}, connect.CodeInvalidArgument, "page_token"},
	} {
		_, err := c.templates.GetTemplateDelivery(context.Background(), connect.NewRequest(tc.req))
		if connect.CodeOf(err) != tc.code || (tc.field != "" && apierr.FieldOf(err) != tc.field) {
			t.Errorf("%s: %v, want %v naming %q", tc.what, err, tc.code, tc.field)
		}
	}
}
