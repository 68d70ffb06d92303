// Package workspace is the Workspace domain: validation, the state machine,
// the records and their revisions, and the long commands that drive a
// Workspace's lifecycle.
//
// A create or start is admitted and recorded, then placed on a node
// (fleet.Place: every placement constraint; CreateOnNode and StartOnNode
// fix the node), which boots the VM. While no node takes it, it waits,
// saying why in GetWorkspaceCommand's waiting_for, until the fleet's
// placement timeout fails it at PLACING. Nothing pretends to have started.
package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/ctrl/netpolicy"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/store"
)

// Runner is what the domain needs of the command runner.
type Runner interface {
	Kick()
	Handle(kind string, h command.Handler)
	// Do admits as command.Do, starting a long command it admitted at
	// once (command.Runner.Do).
	Do(ctx context.Context, fn func(tx *store.Tx) error) error
	// DoTogether is Do, sharing a transaction with the admissions of
	// other callers (command.Runner.DoTogether).
	DoTogether(ctx context.Context, fn func(tx *store.Tx) error) error
}

// Service is the Workspace domain.
type Service struct {
	store   *store.Store
	fleet   *fleet.Fleet
	volumes *volume.Service
	runner  Runner
	now     func() time.Time
}

// New makes the Workspace domain and registers its long commands.
func New(s *store.Store, f *fleet.Fleet, v *volume.Service, r Runner) *Service {
	w := &Service{store: s, fleet: f, volumes: v, runner: r, now: time.Now}
	r.Handle(kindCreate, w.runPlacement)
	r.Handle(kindRestore, w.runPlacement)
	r.Handle(kindStart, w.runPlacement)
	r.Handle(kindStop, w.runStop)
	r.Handle(kindPolicy, w.runPolicy)
	r.Handle(egress.KindApplyEgressUpdate, w.runPolicy)
	r.Handle(egress.KindApplyResolverUpdate, w.runPolicy)
	r.Handle(kindDelete, w.runDelete)
	return w
}

// Command kinds of this domain.
const (
	kindCreate      = "CreateWorkspace"
	kindRestore     = "RestoreWorkspace"
	kindStart       = "StartWorkspace"
	kindStop        = "StopWorkspace"
	kindDelete      = "DeleteWorkspace"
	kindMemory      = "UpdateWorkspaceMemory"
	kindBinding     = "UpdateWorkspaceVolumeBinding"
	kindLayer       = "ResizeWorkspaceWritableLayer"
	kindPolicy      = "UpdateWorkspaceNetworkPolicy"
	kindLabels      = "UpdateWorkspaceLabels"
	kindAnnotations = "UpdateWorkspaceAnnotations"
	kindExpiration  = "UpdateWorkspaceExpiration"
)

var commandKinds = map[string]ctrlv1.WorkspaceCommandKind{
	kindCreate: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_CREATE, kindRestore: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_RESTORE, kindStart: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_START,
	kindStop: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_STOP, kindDelete: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_DELETE,
	kindMemory: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_MEMORY, kindBinding: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_VOLUME_BINDING,
	kindLayer: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_RESIZE_WRITABLE_LAYER, kindPolicy: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_NETWORK_POLICY,
	kindLabels: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_LABELS, kindAnnotations: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_ANNOTATIONS,
	kindExpiration: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_EXPIRATION,
	// An Egress update's application changes the policy in force too.
	egress.KindApplyEgressUpdate:   ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_NETWORK_POLICY,
	egress.KindApplyResolverUpdate: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_NETWORK_POLICY,
	transfer.KindExportWorkspace:   ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_EXPORT,
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ws-" + hex.EncodeToString(b)
}

// get reads a Workspace or answers not_found.
func get(tx *store.Tx, id string, lock bool) (*ctrlv1.Workspace, error) {
	w, err := tx.GetWorkspace(id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("workspace", id)
	}
	return w, err
}

func precondition(w *ctrlv1.Workspace, format string, args ...any) error {
	return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedWorkspace: w}, format, args...)
}

// Create admits a new Workspace in CREATING.
func (s *Service) Create(ctx context.Context, req *ctrlv1.CreateWorkspaceRequest) (*ctrlv1.CreateWorkspaceResponse, error) {
	return s.create(ctx, req, req, "")
}

// create admits req under the command input given (req itself, or the
// ...OnNode request around it), placed on nodeID only when it is set.
func (s *Service) create(ctx context.Context, req *ctrlv1.CreateWorkspaceRequest, input proto.Message, nodeID string) (*ctrlv1.CreateWorkspaceResponse, error) {
	res, err := s.admitCreate(ctx, req, input, nodeID, creation{kind: kindCreate,
		respond: func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.CreateWorkspaceResponse{Workspace: w, Command: c}
		}})
	if err != nil {
		return nil, err
	}
	return res.(*ctrlv1.CreateWorkspaceResponse), nil
}

// creation is how a command that makes a Workspace is admitted: its kind,
// what else its admission writes (in the same transaction, before the
// Workspace) and its response.
type creation struct {
	kind    string
	also    func(tx *store.Tx, now time.Time) error
	respond func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message
}

// admitCreate validates req and admits it as c says.
func (s *Service) admitCreate(ctx context.Context, req *ctrlv1.CreateWorkspaceRequest, input proto.Message, nodeID string, c creation) (proto.Message, error) {
	now := s.now()
	binding, policy, err := s.validateCreate(req, now)
	if err != nil {
		return nil, err
	}
	spec := req.GetSpec()
	var res proto.Message
	// A create placed by ctrl, whose Volume (if any) exists, is placed in
	// its admission's transaction (beginStart), which it shares with the
	// creates of other callers that arrive meanwhile
	// (command.Runner.DoTogether): on PostgreSQL they take the shared
	// pool's lock once, not each in turn.
	var begun beginning
	err = s.runner.DoTogether(ctx, func(tx *store.Tx) error {
		begun.forget()
		out, err := command.Admit(tx, now, req.GetCommand().GetCommandId(), c.kind, input, func() (command.Effect, error) {
			if err := registered(tx, nodeID); err != nil {
				return command.Effect{}, err
			}
			if c.also != nil {
				if err := c.also(tx, now); err != nil {
					return command.Effect{}, err
				}
			}
			if err := egress.CheckPolicyReferences(tx, "spec.network_policy", policy); err != nil {
				return command.Effect{}, err
			}
			ref, err := resolveTemplate(tx, "spec.template", spec.GetTemplate())
			if err != nil {
				return command.Effect{}, err
			}
			launchRef, err := requestedLaunch(tx, "spec.platform_key", spec.GetPlatformKey())
			if err != nil {
				return command.Effect{}, err
			}
			w := &ctrlv1.Workspace{
				WorkspaceId: newID(), State: ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING,
				CreatedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
				Labels: spec.GetLabels(), Annotations: spec.GetAnnotations(), LabelsRevision: 1, AnnotationsRevision: 1,
				Spec: &ctrlv1.WorkspaceSpec{
					Template: ref, Resources: spec.GetResources(), Capabilities: spec.GetCapabilities(),
					ResourcesRevision: 1, BindingRevision: 1, LaunchBindingVersion: 1, LaunchRef: launchRef,
				},
			}
			policy.Revision = 1
			w.Spec.NetworkPolicy = policy
			if spec.GetExpiration() != nil {
				w.Expiration = &ctrlv1.WorkspaceExpiration{Policy: spec.GetExpiration(), Revision: 1}
			}
			if err := s.bind(tx, w, binding, nodeID); err != nil {
				return command.Effect{}, err
			}
			if err := tx.PutNewWorkspace(w); err != nil {
				return command.Effect{}, err
			}
			// New: no runtime yet.
			res := c.respond(viewOf(w, &storev1.WorkspaceRuntime{}, volumesIn(tx), now), admitted(req.GetCommand().GetCommandId(), w.GetWorkspaceId(), c.kind, now))
			eff := command.Effect{Target: w.GetWorkspaceId(), Result: res, Long: true}
			switch {
			case c.kind != kindCreate || nodeID != "":
			case binding.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW:
				eff.Begin = begun.effect(func(cmd *storev1.Command) (begunStep, error) { return s.beginVolume(tx, cmd, w, req) })
			default:
				eff.Begin = begun.effect(func(cmd *storev1.Command) (begunStep, error) {
					return s.beginStart(tx, cmd, w, &storev1.WorkspaceRuntime{WorkspaceId: w.GetWorkspaceId()}, req, true)
				})
			}
			return eff, nil
		})
		if err == nil {
			res = out
		}
		return err
	})
	if err != nil {
		begun.forget()
	}
	return res, err
}

// validateCreate is every check of a create that needs no database, at
// now: it returns the binding with its defaults filled and the policy to
// store.
func (s *Service) validateCreate(req *ctrlv1.CreateWorkspaceRequest, now time.Time) (*ctrlv1.WorkspaceVolumeBinding, *ctrlv1.NetworkPolicy, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, nil, err
	}
	spec := req.GetSpec()
	if err := checkTemplate("spec.template", spec.GetTemplate()); err != nil {
		return nil, nil, err
	}
	if err := checkResources("spec.resources", spec.GetResources()); err != nil {
		return nil, nil, err
	}
	if err := checkCapabilities("spec.capabilities", spec.GetCapabilities()); err != nil {
		return nil, nil, err
	}
	if err := checkPlatformKey("spec.platform_key", spec.GetPlatformKey()); err != nil {
		return nil, nil, err
	}
	binding, err := normalizeBinding("spec.volume", spec.GetVolume(), true)
	if err != nil {
		return nil, nil, err
	}
	if binding.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW {
		if err := s.volumes.CheckNewSpec("spec.volume.new_volume", binding.GetNewVolume()); err != nil {
			return nil, nil, err
		}
	}
	policy, err := netpolicy.Normalize("spec.network_policy", spec.GetNetworkPolicy())
	if err != nil {
		return nil, nil, err
	}
	if err := labels.ValidateLabels("spec.labels", spec.GetLabels()); err != nil {
		return nil, nil, err
	}
	if err := labels.ValidateAnnotations("spec.annotations", spec.GetAnnotations()); err != nil {
		return nil, nil, err
	}
	if spec.GetExpiration() != nil {
		if err := checkExpiration("spec.expiration", spec.GetExpiration(), now); err != nil {
			return nil, nil, err
		}
	}
	return binding, policy, nil
}

// bind stores binding b on w: NEW creates the Volume (CREATING, bound), BOUND
// checks and binds an existing one, NONE binds nothing. nodeID is the node
// a pinned create places w on ("" for none): a NEW Volume naming no pool
// goes to that node's default pool.
func (s *Service) bind(tx *store.Tx, w *ctrlv1.Workspace, b *ctrlv1.WorkspaceVolumeBinding, nodeID string) error {
	stored := &ctrlv1.WorkspaceVolumeBinding{Mode: b.GetMode(), MountPath: b.GetMountPath(), DeleteWithWorkspace: b.DeleteWithWorkspace, VolumeId: b.GetVolumeId()}
	switch b.GetMode() {
	case ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE:
		w.Spec.Volume = stored
		return nil
	case ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW:
		vol, err := s.volumes.NewVolume(tx, b.GetNewVolume(), nodeID)
		if err != nil {
			return err
		}
		vol.BoundWorkspaceId = w.GetWorkspaceId()
		stored.Mode = ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND
		stored.VolumeId = vol.GetVolumeId()
		w.Spec.Volume = stored
		return tx.PutVolume(vol)
	}
	vol, err := tx.GetVolume(b.GetVolumeId(), true)
	if errors.Is(err, store.ErrNotFound) {
		return apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: "volume.volume_id"}, "volume %q not found", b.GetVolumeId())
	} else if err != nil {
		return err
	}
	switch {
	case vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST:
		return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: vol, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST}, "volume %s is LOST", vol.GetVolumeId())
	case vol.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE:
		return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: vol}, "volume %s is %s; only an AVAILABLE Volume can be bound", vol.GetVolumeId(), vol.GetState())
	case vol.GetBoundWorkspaceId() != "" && vol.GetBoundWorkspaceId() != w.GetWorkspaceId():
		return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: vol}, "volume %s is bound to workspace %s; a Volume is bound by at most one undeleted Workspace", vol.GetVolumeId(), vol.GetBoundWorkspaceId())
	}
	if err := pool.NotMoving(tx, vol.GetVolumeId()); err != nil {
		return err
	}
	vol.BoundWorkspaceId = w.GetWorkspaceId()
	vol.UpdatedAt = timestamppb.New(s.now())
	w.Spec.Volume = stored
	return tx.PutVolume(vol)
}

// admitted is the WorkspaceCommand as its admission answers it.
func admitted(id, workspaceID, kind string, now time.Time) *ctrlv1.WorkspaceCommand {
	return &ctrlv1.WorkspaceCommand{
		CommandId: id, WorkspaceId: workspaceID, Kind: commandKinds[kind],
		State: ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED, AdmittedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
	}
}

// view is a Workspace as the API returns it: stored state with the
// projections derived at read (persistent paths, retention tiers, UNKNOWN).
func (s *Service) view(tx *store.Tx, w *ctrlv1.Workspace) *ctrlv1.Workspace {
	out, _ := s.viewAndNode(tx, w)
	return out
}

// viewAndNode is view, with what observeSession says of the node whose
// control session it judged.
func (s *Service) viewAndNode(tx *store.Tx, w *ctrlv1.Workspace) (*ctrlv1.Workspace, judged) {
	rt, err := tx.GetRuntime(w.GetWorkspaceId(), false)
	if err != nil {
		rt = &storev1.WorkspaceRuntime{}
	}
	out := viewOf(w, rt, volumesIn(tx), s.now())
	return out, s.observeSession(out, rt, func() (*operatorv1.NodeRegistration, error) { return tx.GetNode(rt.GetNodeId(), false) })
}

// judged is the node whose control session a view judged ("" for none)
// and when the view changes with no write, unless the session comes back:
// the instant it turns UNKNOWN (zero for none).
type judged struct {
	node      string
	unknownAt time.Time
}

// observeSession makes out UNKNOWN when the fleet says its execution
// (rt's) cannot be observed (fleet.ObservedState), and says which node's
// session it judged. read reads the node's registration where this
// replica does not hold its session.
func (s *Service) observeSession(out *ctrlv1.Workspace, rt *storev1.WorkspaceRuntime, read func() (*operatorv1.NodeRegistration, error)) judged {
	if out.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || rt.GetNodeId() == "" {
		return judged{}
	}
	j := judged{node: rt.GetNodeId()}
	out.State, j.unknownAt = s.fleet.ObservedState(out.GetState(), j.node, read)
	return j
}

// volumeReader reads a Volume for a view (volumesIn).
type volumeReader func(id string) (*ctrlv1.Volume, error)

// volumesIn reads Volumes in tx.
func volumesIn(tx *store.Tx) volumeReader {
	return func(id string) (*ctrlv1.Volume, error) { return tx.GetVolume(id, false) }
}

// readVolume reads Volume id with volume; a nil volume reads none.
func readVolume(volume volumeReader, id string) (*ctrlv1.Volume, error) {
	if volume == nil {
		return nil, store.ErrNotFound
	}
	return volume(id)
}

// viewOf is view for a Workspace whose runtime the caller has, at now;
// volume reads its bound Volume, if it has one.
func viewOf(w *ctrlv1.Workspace, rt *storev1.WorkspaceRuntime, volume volumeReader, now time.Time) *ctrlv1.Workspace {
	out := proto.Clone(w).(*ctrlv1.Workspace)
	judgeDelivery(out.GetDelivery(), now)
	running := rt.GetInstanceId() != ""
	first := rt.GetStarts() <= 1
	reset := func(reason ctrlv1.RetentionResetReason) (ctrlv1.RetentionContinuity, ctrlv1.RetentionResetReason) {
		return ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET, reason
	}
	unavailable := ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_UNAVAILABLE
	available := ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_AVAILABLE

	promised := &ctrlv1.RetentionTier{Kind: ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_PROMISED, Availability: ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_NOT_DECLARED}
	out.PersistentPaths = nil
	if b := out.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		out.PersistentPaths = []string{b.GetMountPath()}
		promised.Paths = []string{b.GetMountPath()}
		promised.Availability = unavailable
		if vol, err := readVolume(volume, b.GetVolumeId()); err == nil {
			switch vol.GetState() {
			case ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, ctrlv1.VolumeState_VOLUME_STATE_ATTACHED:
				promised.Availability = available
			}
			c := vol.GetSpec().GetCapacityBytes()
			promised.CapacityBytes = &c
		}
		if rt.GetStarts() > 0 {
			promised.Continuity = ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED
			if first {
				promised.Continuity, promised.ResetReason = reset(ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_FIRST_START)
			}
		}
	}
	bestEffort := &ctrlv1.RetentionTier{Kind: ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT, Paths: []string{"/"}, Availability: unavailable}
	if layerExists(rt) {
		bestEffort.Availability = available
		c := rt.GetLayerCapacityBytes()
		bestEffort.CapacityBytes = &c
		bestEffort.Continuity, bestEffort.ResetReason = rt.GetLayerContinuity(), rt.GetLayerResetReason()
	}
	none := &ctrlv1.RetentionTier{Kind: ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_NONE, Paths: []string{"/tmp", "/run"}, Availability: unavailable}
	if running {
		// tmpfs: whatever was there is gone at every start.
		none.Availability = available
		none.Continuity = ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET
	}
	out.RetentionTiers = []*ctrlv1.RetentionTier{promised, bestEffort, none}
	return out
}

// deliveryStaleAfter is how long a delivery's bytes may stand still
// before it reads as stuck: its node reports them every second while they
// arrive.
const deliveryStaleAfter = 30 * time.Second

// judgeDelivery tells "stuck" from "still arriving": a delivery whose bytes
// have not moved for deliveryStaleAfter (observed_at is when they last
// moved) is UNKNOWN / OBSERVATION_STALE, with the bytes as they stood.
func judgeDelivery(d *ctrlv1.TemplateDeliveryObservation, now time.Time) {
	if d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING || d.GetObservedAt() == nil {
		return
	}
	if still := now.Sub(d.GetObservedAt().AsTime()); still > deliveryStaleAfter {
		d.State, d.Reason = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_UNKNOWN, ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_OBSERVATION_STALE
		d.Message = fmt.Sprintf("no artifact bytes arrived for %s: the transfer stalled or its node stopped reporting", still.Round(time.Second))
	}
}

// layerExists: a start made the writable layer rt places (a layer placed
// for a start that has not run yet does not exist).
func layerExists(rt *storev1.WorkspaceRuntime) bool {
	return rt.GetStarts() > 0 && rt.GetLayerPool() != ""
}

// Get reads one Workspace.
func (s *Service) Get(ctx context.Context, req *ctrlv1.GetWorkspaceRequest) (*ctrlv1.GetWorkspaceResponse, error) {
	w, err := s.read(ctx, req.GetWorkspaceId())
	return &ctrlv1.GetWorkspaceResponse{Workspace: w}, err
}

// read reads one Workspace's view: with its runtime in one statement
// (store.WorkspaceAndRuntime) when the view reads nothing else, in a
// Snapshot with its Volume when it has one bound.
func (s *Service) read(ctx context.Context, id string) (*ctrlv1.Workspace, error) {
	out, _, err := s.readAndNode(ctx, id)
	return out, err
}

// readAndNode is read, with the node whose session the view judged
// (viewAndNode).
func (s *Service) readAndNode(ctx context.Context, id string) (out *ctrlv1.Workspace, node judged, err error) {
	w, rt, err := s.store.WorkspaceAndRuntime(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, judged{}, apierr.NotFound("workspace", id)
	}
	if err != nil {
		return nil, judged{}, err
	}
	if w.GetSpec().GetVolume().GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		out = viewOf(w, rt, nil, s.now())
		node = s.observeSession(out, rt, func() (n *operatorv1.NodeRegistration, err error) {
			err = s.store.Snapshot(ctx, func(tx *store.Tx) error {
				n, err = tx.GetNode(rt.GetNodeId(), false)
				return err
			})
			return n, err
		})
		return out, node, nil
	}
	err = s.store.Snapshot(ctx, func(tx *store.Tx) error {
		w, err := get(tx, id, false)
		if err == nil {
			out, node = s.viewAndNode(tx, w)
		}
		return err
	})
	return out, node, err
}

// List pages Workspaces by workspace_id, narrowed by a label selector.
func (s *Service) List(ctx context.Context, req *ctrlv1.ListWorkspacesRequest) (*ctrlv1.ListWorkspacesResponse, error) {
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	filter := fmt.Sprintf("%s|deleted=%t", sel.String(), req.GetIncludeDeleted())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &ctrlv1.ListWorkspacesResponse{}
	err = s.store.Snapshot(ctx, func(tx *store.Tx) error {
		list, next, err := page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(w *ctrlv1.Workspace) string { return w.GetWorkspaceId() },
			func(w *ctrlv1.Workspace) bool { return sel.Matches(w.GetLabels()) },
			func(after string, n int) ([]*ctrlv1.Workspace, error) {
				return tx.ListWorkspaces(after, n, req.GetIncludeDeleted())
			})
		for _, w := range list {
			res.Workspaces = append(res.Workspaces, s.view(tx, w))
		}
		res.NextPageToken = next
		return err
	})
	return res, err
}

// GetCommand reads one command of a Workspace.
func (s *Service) GetCommand(ctx context.Context, req *ctrlv1.GetWorkspaceCommandRequest) (*ctrlv1.GetWorkspaceCommandResponse, error) {
	var c *store.CommandRow
	err := s.store.Snapshot(ctx, func(tx *store.Tx) error {
		var err error
		c, err = tx.GetCommand(req.GetCommandId(), false)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (commandKinds[c.GetKind()] == 0 ||
			(req.GetWorkspaceId() != "" && c.GetTargetId() != req.GetWorkspaceId()))) {
			return apierr.NotFound("workspace command", req.GetCommandId())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.GetWorkspaceCommandResponse{Command: commandView(c.Command)}, nil
}

var commandStates = map[storev1.CommandState]ctrlv1.WorkspaceCommandState{
	storev1.CommandState_COMMAND_STATE_ADMITTED:  ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED,
	storev1.CommandState_COMMAND_STATE_RUNNING:   ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_RUNNING,
	storev1.CommandState_COMMAND_STATE_WAITING:   ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_WAITING,
	storev1.CommandState_COMMAND_STATE_SUCCEEDED: ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED,
	storev1.CommandState_COMMAND_STATE_FAILED:    ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED,
}

func commandView(c *storev1.Command) *ctrlv1.WorkspaceCommand {
	return &ctrlv1.WorkspaceCommand{
		CommandId: c.GetCommandId(), WorkspaceId: c.GetTargetId(), Kind: commandKinds[c.GetKind()], State: commandStates[c.GetState()],
		Progress: c.GetProgress(), WaitingFor: c.GetWaitingFor(), Failure: c.GetFailure(),
		AdmittedAt: c.GetAdmittedAt(), UpdatedAt: c.GetUpdatedAt(), CompletedAt: c.GetCompletedAt(),
	}
}

// requestedLaunch is the current default Launch of the PlatformKey a
// create names, bound at admission: a key that does not exist is
// not_found, one without a Launch failed_precondition. No key ("") binds
// the deployment default's, here when there is one, or at placement
// (resolve).
func requestedLaunch(tx *store.Tx, field, key string) (string, error) {
	if key == "" {
		// The deployment's default: bound now when there is one, or by the
		// placement once a platform is registered (kibotos dev registers
		// one at its first start). Bound here, the placement that follows
		// in the same transaction (beginStart) does not write the
		// Workspace again.
		l, err := tx.DefaultLaunch("")
		if errors.Is(err, store.ErrNotFound) {
			return "", nil
		}
		return l.GetLaunchRef(), err
	}
	if _, err := tx.GetPlatformKey(key, false); errors.Is(err, store.ErrNotFound) {
		return "", apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field},
			"%s: PlatformKey %q not found", field, key)
	} else if err != nil {
		return "", err
	}
	l, err := tx.DefaultLaunch(key)
	if errors.Is(err, store.ErrNotFound) {
		return "", apierr.Precondition(&ctrlv1.ErrorDetail{Field: field}, "%s: PlatformKey %q has no Launch yet: register a platform on it", field, key)
	} else if err != nil {
		return "", err
	}
	return l.GetLaunchRef(), nil
}
