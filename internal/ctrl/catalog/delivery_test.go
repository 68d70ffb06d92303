package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/template"
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

// liveAt is a fleet whose live sessions are those live at a time.
type liveAt time.Time

func (l liveAt) LiveAt(time.Time) time.Time { return time.Time(l) }

// reportingNode is an admitted node with a live session seen at seen, and
// live for a minute after, advertising capabilities.
func reportingNode(id string, seen time.Time, capabilities ...string) *operatorv1.NodeRegistration {
	return &operatorv1.NodeRegistration{
		NodeId: id, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
		Status:      operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
		Session:     &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: timestamppb.New(seen), LiveUntil: timestamppb.New(seen.Add(time.Minute))},
		Observation: &operatorv1.NodeObservationSummary{Capabilities: capabilities},
	}
}

// The states no test with real nodes reaches quickly: an image arriving
// (its bytes and when it started), a node that runs no VMs (whatever it
// holds), a simulated VM provider. A revision that is not READY has no
// image to deliver.
func TestTemplateDeliveryJudgesEachNodesRecord(t *testing.T) {
	ctx := context.Background()
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			st := storetest.Open(t, b.DSN(t))
			seen := time.Now().UTC().Truncate(time.Microsecond)
			c := newCatalogJudging(t, st, t.TempDir(), liveAt(seen))
			body := []byte("an image")
			path := filepath.Join(t.TempDir(), "root.img")
			if err := os.WriteFile(path, body, 0o644); err != nil {
				t.Fatal(err)
			}
			image, err := c.RegisterTemplate(ctx, "base", &template.Image{Path: path, Digest: digestOf(body), Size: int64(len(body))}, true)
			if err != nil {
				t.Fatal(err)
			}
			started := seen.Add(-time.Minute)
			err = st.Tx(ctx, func(tx *store.Tx) error {
				for _, n := range []*operatorv1.NodeRegistration{
					reportingNode("node-arriving", seen, "provider.qemu"), reportingNode("node-novm", seen, "storage.block_file"),
					reportingNode("node-sim", seen, "provider.sim"),
				} {
					if err := tx.PutNode(n); err != nil {
						return err
					}
				}
				complete := store.NodeArtifact{Digest: digestOf(body), Complete: true, DeliveredBytes: 8, TotalBytes: 8}
				if err := tx.SetNodeArtifacts("node-arriving", []store.NodeArtifact{{Digest: digestOf(body), DeliveredBytes: 3, TotalBytes: 8}}, started); err != nil {
					return err
				}
				if err := tx.SetNodeArtifacts("node-novm", []store.NodeArtifact{complete}, seen); err != nil {
					return err
				}
				return tx.SetNodeArtifacts("node-sim", []store.NodeArtifact{complete}, seen)
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.GetTemplateDelivery(ctx, &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "base"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.GetRef().GetRevision() != image.GetRef().GetRevision() || len(res.GetDeliveries()) != 3 || res.GetReadyNodeCount() != 1 || res.GetNotReadyNodeCount() != 2 {
				t.Fatalf("delivery of base: %v, want 3 nodes, node-sim ready", res)
			}
			arriving, novm, sim := res.GetDeliveries()[0].GetObservation(), res.GetDeliveries()[1].GetObservation(), res.GetDeliveries()[2].GetObservation()
			wantDelivery(t, "node-arriving", arriving, notReady, ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING, 3, 8)
			if !arriving.GetStartedAt().AsTime().Equal(started) || !arriving.GetObservedAt().AsTime().Equal(seen) {
				t.Errorf("node-arriving: started_at %v observed_at %v, want %v and %v", arriving.GetStartedAt().AsTime(), arriving.GetObservedAt().AsTime(), started, seen)
			}
			wantDelivery(t, "node-novm", novm, notReady, ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_CAPABILITY_MISMATCH, 8, 8)
			wantDelivery(t, "node-sim", sim, ready, noReason, 8, 8)

			upload := uploadSource(t, c, "u1", tarOf(t, map[string]string{"a": "1"}))
			if _, err := c.CreateTemplateRevision(ctx, &operatorv1.CreateTemplateRevisionRequest{Command: cmd("r"), Template: "base", Revision: "building",
				Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: upload}}}}); err != nil {
				t.Fatal(err)
			}
			_, err = c.GetTemplateDelivery(ctx, &operatorv1.GetTemplateDeliveryRequest{Selector: &ctrlv1.TemplateSelector{Template: "base", Revision: "building"}})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("the delivery of a BUILDING revision: %v, want failed_precondition", err)
			}
		})
	}
}
