package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/store"
)

// DefaultLayerCapacity is the writable layer a request of zero gets: the
// storage profile of the nodes (a sparse file: it uses only what is
// written).
const DefaultLayerCapacity = 4 << 30

// instanceID names an execution by its Workspace and the command that
// started it, so a node's report leads back to the Workspace.
func instanceID(workspaceID, commandID string) string {
	sum := sha256.Sum256([]byte(commandID))
	return workspaceID + "." + hex.EncodeToString(sum[:6])
}

// WorkspaceOf is the Workspace an instance id belongs to.
func WorkspaceOf(instanceID string) string {
	ws, _, _ := strings.Cut(instanceID, ".")
	return ws
}

// launchPlan is what a start needs, read at the start of a step.
type launchPlan struct {
	w        *ctrlv1.Workspace
	runtime  *storev1.WorkspaceRuntime
	volume   *ctrlv1.Volume
	launch   *storev1.Launch
	template *storev1.TemplateRevision
	// node is the only candidate of an ...OnNode command, "" otherwise.
	node string
	// egresses are the Egresses its network policy forwards through.
	egresses []*nodev1.ResolvedEgress
	// resolvers are the Resolvers its link DNS address forwards to.
	resolvers []*nodev1.ResolvedResolver
	// admitted says the Workspace was admitted in the plan's own
	// transaction (beginStart): nothing of it is stored but what that
	// transaction wrote.
	admitted bool
}

// runPlacement drives create and start: resolve what boots, place the
// execution on a node, create the NEW Volume there if it is not yet, start
// the VM and wait for its agent.
func (s *Service) runPlacement(ctx context.Context, wk *command.Work) error {
	stage := startStage(wk.Command().GetKind())
	switch b := wk.Begun().(type) {
	case *begunStart:
		return s.goOnFromAdmission(ctx, wk, b, stage)
	case *begunVolume:
		return s.goOnWithVolume(ctx, wk, b, stage)
	}
	if wk.Command().GetNodeId() == "" && wk.Command().GetKind() != kindRestore {
		nodeID, plan, start, answer, err := s.placeAndStart(ctx, wk, stage)
		if !errors.Is(err, errNotAtOnce) && !errors.Is(err, fleet.ErrNotNew) {
			if answer == nil || err != nil {
				return err
			}
			return s.startAnswered(ctx, wk, plan, nodeID, start, answer)
		}
	}
	// A step that must place places in the transaction that reads its plan.
	var placed *placement
	plan, wait, err := s.plan(ctx, wk, func(tx *store.Tx, plan *launchPlan) error {
		placed = nil
		if wk.Command().GetNodeId() != "" || plan.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST {
			return nil // placed by an earlier step; or failing below
		}
		var reserve func(tx *store.Tx) (*pool.Refusal, error)
		var err error
		if placed, reserve, err = s.place(tx, wk.Command().GetCommandId(), plan); reserve == nil || err != nil {
			return err
		}
		poolRefusal, err := reserve(tx)
		if poolRefusal != nil {
			placed.poolRefusal = poolRefusal
			return errPoolRefused
		}
		return err
	})
	if errors.Is(err, errPoolRefused) {
		err = nil // placed says so; the Allocation made went with the rollback
	}
	if v := plan.GetVolume(); err == nil && v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST {
		// Its pool was declared lost while the start waited.
		return s.failStart(ctx, wk, &ctrlv1.WorkspaceFailure{
			Stage: stage, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST,
			Message: fmt.Sprintf("the bound Volume %s is LOST: bind another Volume or delete the Workspace", v.GetVolumeId()),
		})
	}
	if err != nil || wait != "" {
		if wait != "" {
			return wk.Wait(ctx, wait, time.Minute)
		}
		return err
	}
	nodeID := wk.Command().GetNodeId()
	if placed != nil {
		// Counted once committed: a transaction run again counts once.
		countPlacement(s.fleet.Metrics(), placed.refusal, placed.poolRefusal)
		switch {
		case placed.poolRefusal != nil:
			return s.failStart(ctx, wk, placed.poolRefusal.Failure(ctrlv1.FailureStage_FAILURE_STAGE_PLACING, s.now()))
		case placed.refusal != nil:
			return s.placementRefused(ctx, wk, placed.refusal)
		}
		nodeID = placed.nodeID
	}
	if wk.Command().GetKind() == kindRestore {
		if done, err := s.importParts(ctx, wk, plan, nodeID); !done || err != nil {
			return err
		}
	}
	if v := plan.volume; v != nil && v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_CREATING {
		answer, err := s.fleet.Await(ctx, wk, ensureVolume, nodeID, &nodev1.EnsureBlockFile{
			Ref: volumeRef(v), CapacityBytes: v.GetSpec().GetCapacityBytes(),
		}, ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME)
		if answer == nil || err != nil {
			return err
		}
		if answer.Failure != nil {
			return s.failStart(ctx, wk, answer.Failure)
		}
		if err := s.store.Tx(ctx, func(tx *store.Tx) error {
			return s.volumes.Update(tx, v.GetVolumeId(), func(v *ctrlv1.Volume) { v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		}); err != nil {
			return err
		}
	}
	start := s.startExecution(plan, nodeID, wk.Command().GetCommandId())
	answer, err := s.fleet.AwaitUnrecorded(ctx, wk, "start", nodeID, start, stage)
	if answer == nil || err != nil {
		return err
	}
	return s.startAnswered(ctx, wk, plan, nodeID, start, answer)
}

// startStage is the FailureStage of a failed start of a command of kind.
func startStage(kind string) ctrlv1.FailureStage {
	switch kind {
	case kindCreate:
		return ctrlv1.FailureStage_FAILURE_STAGE_CREATING
	case kindRestore:
		return restoreStage
	}
	return ctrlv1.FailureStage_FAILURE_STAGE_STARTING
}

// errNotAtOnce rolls back placeAndStart's transaction: the step cannot
// place and start in one (it waits, a placement is refused, a Volume is
// to be made first, or its pool is lost); the step goes the long way.
var errNotAtOnce = errors.New("not placed and started at once")

// placeAndStart is the short way of a first step: it reads the plan,
// places the execution and records StartExecution for the node chosen in
// one transaction, then waits for the node's answer (fleet.AwaitDecided).
// Anything else the step has to do first answers errNotAtOnce, having
// written nothing.
func (s *Service) placeAndStart(ctx context.Context, wk *command.Work, stage ctrlv1.FailureStage) (string, *launchPlan, *nodev1.StartExecution, *fleet.Answer, error) {
	req, err := wk.Request()
	if err != nil {
		return "", nil, nil, nil, err
	}
	req, node := unpin(req)
	var plan *launchPlan
	var start *nodev1.StartExecution
	nodeID, answer, err := s.fleet.AwaitDecided(ctx, wk, "start", stage, func(tx *store.Tx) (string, proto.Message, error) {
		var wait string
		var err error
		if plan, wait, err = s.planIn(tx, wk, req, node); err != nil {
			return "", nil, err
		} else if wait != "" {
			return "", nil, errNotAtOnce
		}
		var nodeID string
		nodeID, start, err = s.startAtOnce(tx, wk.Command().GetCommandId(), plan)
		return nodeID, start, err
	})
	if errors.Is(err, errPoolRefused) {
		err = errNotAtOnce // the long way says why
	}
	if nodeID != "" { // committed
		countPlacement(s.fleet.Metrics(), nil, nil)
	}
	return nodeID, plan, start, answer, err
}

// startAtOnce places the execution plan describes (for command commandID)
// and answers the StartExecution for the node chosen, in tx; the layer's
// pool reservation is tx's last write (errPoolRefused should the pool
// refuse it). errNotAtOnce when the start cannot go at once: a Volume to
// make first, or lost, or no node takes it now (the long way says why).
func (s *Service) startAtOnce(tx *store.Tx, commandID string, plan *launchPlan) (string, *nodev1.StartExecution, error) {
	if v := plan.GetVolume().GetState(); v == ctrlv1.VolumeState_VOLUME_STATE_CREATING || v == ctrlv1.VolumeState_VOLUME_STATE_LOST {
		return "", nil, errNotAtOnce
	}
	nodeID, err := s.placeAtOnce(tx, commandID, plan)
	if err != nil {
		return "", nil, err
	}
	return nodeID, s.startExecution(plan, nodeID, commandID), nil
}

// placeAtOnce places the execution plan describes in tx, the layer's
// pool reservation tx's last write (errPoolRefused should the pool
// refuse it); errNotAtOnce when no node takes it now.
func (s *Service) placeAtOnce(tx *store.Tx, commandID string, plan *launchPlan) (string, error) {
	placed, reserve, err := s.place(tx, commandID, plan)
	if err == nil && placed.refusal != nil {
		return "", errNotAtOnce
	} else if err != nil {
		return "", err
	}
	if reserve != nil {
		tx.Last(func(tx *store.Tx) error {
			poolRefusal, err := reserve(tx)
			if poolRefusal != nil {
				return errPoolRefused
			}
			return err
		})
	}
	return placed.nodeID, nil
}

// begunStart is a create's or start's placement decided and recorded in
// its admission's transaction (beginStart), for the step that goes on
// from it.
type begunStart struct {
	plan     *launchPlan
	start    *nodev1.StartExecution
	decision *fleet.Decision
}

// beginStart is a start begun in its command's admission's transaction
// tx (command.Effect.Begin), for the command c: the Workspace w (admitted
// by this transaction when admitted is set: new, rt empty), with its
// runtime rt, placed and its StartExecution recorded for the node chosen,
// as placeAndStart would in a transaction of its own. Anything that keeps
// the start from going at once fails it, and the admission is made again
// without it (the step then goes as after a claim). The node's answer is
// expected from before the commit (beginning forgets it should the
// transaction not commit).
func (s *Service) beginStart(tx *store.Tx, c *storev1.Command, w *ctrlv1.Workspace, rt *storev1.WorkspaceRuntime, req any, admitted bool) (*begunStart, error) {
	plan, wait, err := s.planFor(tx, w, rt, req, "")
	if err != nil {
		return nil, err
	} else if wait != "" {
		return nil, errNotAtOnce
	}
	plan.admitted = admitted
	nodeID, start, err := s.startAtOnce(tx, c.GetCommandId(), plan)
	if err != nil {
		return nil, err
	}
	d := s.fleet.Expect(c.GetCommandId(), "start")
	if err := d.Record(tx, s.now(), c, nodeID, start); err != nil {
		d.Forget()
		return nil, err
	}
	return &begunStart{plan: plan, start: start, decision: d}, nil
}

// begunVolume is a create's placement decided in its admission's
// transaction (beginVolume), with the EnsureBlockFile that makes its new
// Volume on the node chosen recorded there, for the step that goes on
// from it: the StartExecution follows the node's answer.
type begunVolume struct {
	plan     *launchPlan
	nodeID   string
	decision *fleet.Decision
}

// beginVolume is beginStart for a create whose new Volume the node must
// make first: the Workspace is placed, its layer reserved, and the
// EnsureBlockFile recorded for the node chosen, in the admission's
// transaction tx. The step that goes on from it (goOnWithVolume) records
// the Volume made and the StartExecution in one transaction once the
// node answered: three transactions a create instead of seven, without
// the node having to order the two operations. Anything that keeps the
// placement from going at once fails it, and the admission is made again
// without it.
func (s *Service) beginVolume(tx *store.Tx, c *storev1.Command, w *ctrlv1.Workspace, req any) (*begunVolume, error) {
	plan, wait, err := s.planFor(tx, w, &storev1.WorkspaceRuntime{WorkspaceId: w.GetWorkspaceId()}, req, "")
	if err != nil {
		return nil, err
	} else if wait != "" || plan.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING {
		return nil, errNotAtOnce
	}
	plan.admitted = true
	nodeID, err := s.placeAtOnce(tx, c.GetCommandId(), plan)
	if err != nil {
		return nil, err
	}
	v := plan.volume
	d := s.fleet.Expect(c.GetCommandId(), ensureVolume)
	if err := d.Record(tx, s.now(), c, nodeID, &nodev1.EnsureBlockFile{Ref: volumeRef(v), CapacityBytes: v.GetSpec().GetCapacityBytes()}); err != nil {
		d.Forget()
		return nil, err
	}
	return &begunVolume{plan: plan, nodeID: nodeID, decision: d}, nil
}

// ensureVolume names the operation that makes a create's new Volume.
const ensureVolume = "ensure-volume"

// goOnWithVolume is the first step of a create begun at its admission
// with a Volume to make (beginVolume): it hands the EnsureBlockFile
// recorded there to its node, and once the node made the Volume records
// it AVAILABLE and the StartExecution in one transaction, then ends the
// start with the node's answer.
func (s *Service) goOnWithVolume(ctx context.Context, wk *command.Work, b *begunVolume, stage ctrlv1.FailureStage) error {
	countPlacement(s.fleet.Metrics(), nil, nil) // committed with the admission
	made, err := s.fleet.AwaitDecision(ctx, wk, b.decision, ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME)
	if made == nil || err != nil {
		return err
	}
	if made.Failure != nil {
		if err := s.failStart(ctx, wk, made.Failure, made.Record); err != nil {
			made.Keep(ctx)
			return err
		}
		return nil
	}
	start := s.startExecution(b.plan, b.nodeID, wk.Command().GetCommandId())
	nodeID, answer, err := s.fleet.AwaitDecided(ctx, wk, "start", stage, func(tx *store.Tx) (string, proto.Message, error) {
		if err := made.Record(tx); err != nil {
			return "", nil, err
		}
		err := s.volumes.Update(tx, b.plan.volume.GetVolumeId(), func(v *ctrlv1.Volume) { v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		return b.nodeID, start, err
	})
	if err != nil {
		made.Keep(ctx)
		return err
	}
	if answer == nil {
		return nil
	}
	return s.startAnswered(ctx, wk, b.plan, nodeID, start, answer)
}

// beginning is the start an admission's transaction began (beginStart)
// in its current run. The step that goes on from the admission waits for
// its answer once the transaction committed; a run that did not commit
// forgets it: forget is called at the start of every run and once the
// transaction failed.
type beginning struct{ begun begunStep }

// begunStep is what an admission began: a begunStart or a begunVolume,
// each with the Decision of the operation it recorded.
type begunStep interface{ recorded() *fleet.Decision }

func (b *begunStart) recorded() *fleet.Decision  { return b.decision }
func (b *begunVolume) recorded() *fleet.Decision { return b.decision }

func (b *beginning) forget() {
	if b.begun != nil {
		b.begun.recorded().Forget()
		b.begun = nil
	}
}

// effect is command.Effect.Begin for what begin begins.
func (b *beginning) effect(begin func(c *storev1.Command) (begunStep, error)) func(c *storev1.Command) (any, error) {
	return func(c *storev1.Command) (any, error) {
		begun, err := begin(c)
		if err != nil {
			return nil, err
		}
		b.begun = begun
		return begun, nil
	}
}

// goOnFromAdmission is the first step of a create or start begun at its
// admission (beginStart): it hands the StartExecution recorded there to
// its node and ends the start with the answer.
func (s *Service) goOnFromAdmission(ctx context.Context, wk *command.Work, b *begunStart, stage ctrlv1.FailureStage) error {
	countPlacement(s.fleet.Metrics(), nil, nil) // committed with the admission
	answer, err := s.fleet.AwaitDecision(ctx, wk, b.decision, stage)
	if answer == nil || err != nil {
		return err
	}
	return s.startAnswered(ctx, wk, b.plan, b.decision.Node(), b.start, answer)
}

// startAnswered ends a start with the node's answer to StartExecution,
// recording the answer in the same transaction when no transaction did
// yet (fleet.Answer.Record), or on its own when that one failed.
func (s *Service) startAnswered(ctx context.Context, wk *command.Work, plan *launchPlan, nodeID string, start *nodev1.StartExecution, answer *fleet.Answer) error {
	err := s.endStart(ctx, wk, plan, nodeID, start, answer)
	if err != nil {
		answer.Keep(ctx)
	}
	return err
}

func (s *Service) endStart(ctx context.Context, wk *command.Work, plan *launchPlan, nodeID string, start *nodev1.StartExecution, answer *fleet.Answer) error {
	if answer.Failure != nil {
		said := startFailure(answer)
		switch {
		case said.GetNetworkUnenforceable():
			answer.Failure.Stage = ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK
		case said.GetNotReady() && wk.Command().GetKind() == kindCreate:
			// A start or a restore keeps its own stage.
			answer.Failure.Stage = ctrlv1.FailureStage_FAILURE_STAGE_WAITING_FOR_READINESS
		}
		return s.failStart(ctx, wk, answer.Failure, answer.Record, func(tx *store.Tx) error { return forgetRemovedLayer(tx, start, answer) })
	}
	status := &nodev1.ExecutionStatus{}
	if err := answer.Result.UnmarshalTo(status); err != nil {
		return err
	}
	// Ended with the other starts answered meanwhile: their commands,
	// Workspaces and runtimes are written by a statement per table
	// (command.Work.SucceedTogether).
	err := wk.SucceedTogether(ctx, func(tx *store.Tx) error {
		if err := answer.Record(tx); err != nil {
			return err
		}
		if err := s.started(tx, plan, nodeID, start, status); err != nil {
			return err
		}
		return s.endRestore(tx, wk, true)
	}, store.RowsOfWorkspace(plan.w.GetWorkspaceId())...)
	if err != nil || startReport(start, status) == nil {
		answer.ForgetReport() // not recorded: the next observation is
	}
	return err
}

// startReport is the report the node's answer to start carried, when it
// is one of the started execution running; nil otherwise.
func startReport(start *nodev1.StartExecution, status *nodev1.ExecutionStatus) *nodev1.ExecutionReport {
	r := status.GetReport()
	if r.GetInstanceId() != start.GetInstanceId() || !r.GetRunning() {
		return nil
	}
	return r
}

// GetVolume is the bound Volume, nil for none (or no plan).
func (p *launchPlan) GetVolume() *ctrlv1.Volume {
	if p == nil {
		return nil
	}
	return p.volume
}

// plan reads the Workspace and resolves its template and Launch, storing
// them in its spec the first time, then runs then (when the command can go
// on) in the same transaction. wait says why the command cannot go on.
func (s *Service) plan(ctx context.Context, wk *command.Work, then func(tx *store.Tx, plan *launchPlan) error) (*launchPlan, string, error) {
	req, err := wk.Request()
	if err != nil {
		return nil, "", err
	}
	req, node := unpin(req)
	var plan *launchPlan
	var wait string
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if plan, wait, err = s.planIn(tx, wk, req, node); err != nil || wait != "" {
			return err
		}
		return then(tx, plan)
	})
	return plan, wait, err
}

// planIn is plan's reading in tx, for a request req (unpinned) and the
// node it pins to ("" for none).
func (s *Service) planIn(tx *store.Tx, wk *command.Work, req any, node string) (*launchPlan, string, error) {
	w, err := tx.GetWorkspace(wk.Command().GetTargetId(), true)
	if err != nil {
		return nil, "", err
	}
	rt, err := tx.GetRuntime(w.GetWorkspaceId(), true)
	if err != nil {
		return nil, "", err
	}
	return s.planFor(tx, w, rt, req, node)
}

// planFor is planIn for the Workspace w and its runtime rt, read (or
// written) in tx already.
func (s *Service) planFor(tx *store.Tx, w *ctrlv1.Workspace, rt *storev1.WorkspaceRuntime, req any, node string) (*launchPlan, string, error) {
	plan := &launchPlan{w: w, runtime: rt, node: node}
	before := bound{w.GetSpec().GetTemplate() != nil, w.GetSpec().GetLaunchRef(), w.GetSpec().GetLaunchBindingVersion()}
	var err error
	if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		if plan.volume, err = tx.GetVolume(b.GetVolumeId(), false); err != nil {
			return nil, "", err
		}
	}
	if wait, err := s.resolve(tx, plan, req); err != nil || wait != "" {
		return plan, wait, err // the Volume read: a LOST one fails the start first
	}
	if plan.egresses, err = resolvedEgresses(tx, w.GetSpec().GetNetworkPolicy()); err != nil {
		return nil, "", err
	}
	if plan.resolvers, err = resolvedResolvers(tx, w.GetSpec().GetNetworkPolicy()); err != nil {
		return nil, "", err
	}
	if (bound{w.GetSpec().GetTemplate() != nil, w.GetSpec().GetLaunchRef(), w.GetSpec().GetLaunchBindingVersion()}) != before {
		// Resolved anew (not a later step, nor a retried one).
		w.UpdatedAt = timestamppb.New(s.now())
		if err := tx.PutWorkspace(w); err != nil {
			return nil, "", err
		}
	}
	return plan, "", nil
}

// bound is what resolve may bind in a Workspace's spec: whether it has a
// template, and its Launch.
type bound struct {
	template      bool
	launch        string
	launchVersion uint64
}

// resolve fills the plan's template and Launch. A create's template was
// resolved at its admission (a create an older ctrl admitted, without one,
// binds the template its selector names here); a create binds the default
// Launch of the deployment's default PlatformKey; an explicit start
// rebinds launch_ref to the current default of the PlatformKey it is on.
func (s *Service) resolve(tx *store.Tx, plan *launchPlan, req any) (string, error) {
	spec := plan.w.GetSpec()
	if spec.GetTemplate() == nil {
		sel := &ctrlv1.TemplateSelector{}
		if create, ok := req.(*ctrlv1.CreateWorkspaceRequest); ok {
			sel = create.GetSpec().GetTemplate()
		}
		t, err := tx.TemplateRevision(sel.GetTemplate(), sel.GetRevision())
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Sprintf("no template matches %q (revision %q): register one (kibotos dev does at first start)", sel.GetTemplate(), sel.GetRevision()), nil
		} else if err != nil {
			return "", err
		}
		spec.Template = &ctrlv1.TemplateRef{Template: t.GetTemplate(), Revision: t.GetRevision()}
	}
	t, err := tx.TemplateRevision(spec.GetTemplate().GetTemplate(), spec.GetTemplate().GetRevision())
	if err != nil {
		return "", fmt.Errorf("template %v: %w", spec.GetTemplate(), err)
	}
	plan.template = t
	key := ""
	if spec.GetLaunchRef() != "" {
		current, err := tx.GetLaunch(spec.GetLaunchRef())
		if err != nil {
			return "", err
		}
		key = current.GetPlatformKey()
		if _, isStart := req.(*ctrlv1.StartWorkspaceRequest); !isStart {
			plan.launch = current
			return "", nil
		}
	}
	l, err := tx.DefaultLaunch(key)
	if errors.Is(err, store.ErrNotFound) {
		return "a platform to be registered (there is none: kibotos dev registers one at first start, kibotos platform build another)", nil
	} else if err != nil {
		return "", err
	}
	if spec.GetLaunchRef() != "" && spec.GetLaunchRef() != l.GetLaunchRef() {
		spec.LaunchBindingVersion++
	}
	spec.LaunchRef = l.GetLaunchRef()
	plan.launch = l
	return "", nil
}

// errPoolRefused rolls back a placement whose layer pool refused the
// layer: the Allocation made in the same transaction goes with it.
var errPoolRefused = errors.New("the layer's pool refused it")

// placement is what a placement decided: the node, or why none takes the
// execution (refusal), or why the layer's pool takes no new layer
// (poolRefusal; its transaction is rolled back then, errPoolRefused).
type placement struct {
	nodeID      string
	refusal     *fleet.Refusal
	poolRefusal *pool.Refusal
}

// place charges the execution to a node (fleet.Place: every placement
// constraint) and answers the reservation of the first writable layer's
// capacity in its pool (reserveLayer), for the caller to make in tx: at
// once, or as the transaction's last write (placeAndStart), since every
// placement of a fleet sharing one pool reserves in it and on PostgreSQL
// each holds the pool's rows locked from its reservation to its commit.
func (s *Service) place(tx *store.Tx, commandID string, plan *launchPlan) (*placement, func(tx *store.Tx) (*pool.Refusal, error), error) {
	res := plan.w.GetSpec().GetResources()
	p := fleet.Placement{
		WorkspaceID: plan.w.GetWorkspaceId(), InstanceID: instanceID(plan.w.GetWorkspaceId(), commandID),
		CPUMillis: res.GetCpuMillis(), MemoryBytes: res.GetMemoryBytes(), Pools: []string{plan.runtime.GetLayerPool()}, Node: plan.node,
		Capabilities: plan.w.GetSpec().GetCapabilities().GetRequired(), New: plan.admitted,
		LayerInDefaultPool: plan.runtime.GetLayerPool() == "" && plan.volume == nil,
	}
	if plan.volume != nil {
		p.Pools = append(p.Pools, plan.volume.GetSpec().GetStoragePool())
	}
	placed, why, err := s.fleet.Place(tx, p)
	if why != nil || err != nil {
		return &placement{refusal: why}, nil, err
	}
	return &placement{nodeID: placed.NodeID}, reserveLayer(plan, placed.DefaultPool), nil
}

// reserveLayer records, in plan's runtime, where a first writable layer
// goes (beside the Volume, or in defaultPool, the node's) and returns the
// reservation of its capacity in that pool, with the runtime's write that
// holds it; for a layer that grows at this start, the reservation of the
// difference (which the layer holds once the node grew it: started records
// the capacity it has). Nil when there is nothing to reserve.
func reserveLayer(plan *launchPlan, defaultPool string) func(tx *store.Tx) (*pool.Refusal, error) {
	rt := plan.runtime // read, locked, in this transaction by planIn
	if rt.GetLayerPool() == "" {
		rt.LayerPool = defaultPool
		if plan.volume != nil {
			rt.LayerPool = plan.volume.GetSpec().GetStoragePool()
		}
		rt.LayerCapacityBytes = layerCapacity(plan.w)
		rt.LayerUnconfirmed = true
		return func(tx *store.Tx) (*pool.Refusal, error) {
			if poolRefusal, err := pool.Reserve(tx, rt.GetLayerPool(), rt.GetLayerCapacityBytes()); poolRefusal != nil || err != nil {
				return poolRefusal, err
			}
			return nil, tx.PutRuntime(rt)
		}
	}
	if grow := layerCapacity(plan.w); grow > rt.GetLayerCapacityBytes() {
		return func(tx *store.Tx) (*pool.Refusal, error) {
			return pool.Reserve(tx, rt.GetLayerPool(), grow-rt.GetLayerCapacityBytes())
		}
	}
	return nil
}

// countPlacement counts one placement decision in
// kibotos_placements_total and kibotos_placement_refusals_total.
func countPlacement(m *metrics.Metrics, refusal *fleet.Refusal, poolRefusal *pool.Refusal) {
	switch {
	case refusal != nil:
		m.Placement(metrics.RefusedByNodes, refusal.Reason.String())
	case poolRefusal != nil:
		m.Placement(metrics.RefusedByLayerPool, poolRefusal.Reason.String())
	default:
		m.Placement("", "")
	}
}

// placementRefused waits while no node takes the execution, telling why in
// waiting_for, for up to the fleet's PlacementTimeout from the command's
// admission (a node coming back, room freeing); after that the create or
// start fails at FAILURE_STAGE_PLACING with the refusal's reason.
func (s *Service) placementRefused(ctx context.Context, wk *command.Work, refusal *fleet.Refusal) error {
	left := s.fleet.PlacementTimeout() - s.now().Sub(wk.Command().GetAdmittedAt().AsTime())
	if left > 0 {
		return wk.Wait(ctx, "a node to take it: "+refusal.Message, min(left, placementRetry))
	}
	return s.failStart(ctx, wk, refusal.Failure())
}

// placementRetry is how often a waiting placement looks again: room that
// frees wakes nothing (node sessions, drains and ratios do).
const placementRetry = 2 * time.Second

// layerCapacity is the capacity of w's writable layer: what it asked for,
// or the storage profile's default.
func layerCapacity(w *ctrlv1.Workspace) uint64 {
	if c := w.GetSpec().GetResources().GetWritableLayerCapacityBytes(); c != 0 {
		return c
	}
	return DefaultLayerCapacity
}

func volumeRef(v *ctrlv1.Volume) *nodev1.BlockFileRef {
	return &nodev1.BlockFileRef{StoragePool: v.GetSpec().GetStoragePool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: v.GetVolumeId()}
}

func layerRef(rt *storev1.WorkspaceRuntime) *nodev1.BlockFileRef {
	return &nodev1.BlockFileRef{StoragePool: rt.GetLayerPool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: rt.GetWorkspaceId()}
}

// startExecution is the node operation that boots the plan.
func (s *Service) startExecution(plan *launchPlan, nodeID, commandID string) *nodev1.StartExecution {
	res := plan.w.GetSpec().GetResources()
	layer := layerCapacity(plan.w)
	vcpus := (res.GetCpuMillis() + 999) / 1000
	start := &nodev1.StartExecution{
		InstanceId: instanceID(plan.w.GetWorkspaceId(), commandID), BootId: "boot-" + commandHash(commandID),
		Kernel: plan.launch.GetKernel(), Initrd: plan.launch.GetInitrd(), TemplateRoot: plan.template.GetRoot(),
		Layer: layerRef(plan.runtime), LayerCapacityBytes: layer,
		Vcpus: max(vcpus, 1), MemoryBytes: res.GetMemoryBytes(),
		Hostname:      plan.w.GetWorkspaceId(),
		NetworkPolicy: plan.w.GetSpec().GetNetworkPolicy(),
		Egresses:      plan.egresses,
		Resolvers:     plan.resolvers,
	}
	if plan.volume != nil {
		start.Volume = volumeRef(plan.volume)
		start.VolumeMountPath = plan.w.GetSpec().GetVolume().GetMountPath()
	}
	return start
}

func commandHash(commandID string) string {
	sum := sha256.Sum256([]byte(commandID))
	return hex.EncodeToString(sum[:8])
}

// started records a running execution: AVAILABLE, one more generation, the
// retention tiers' continuity, the Volume attached.
func (s *Service) started(tx *store.Tx, plan *launchPlan, nodeID string, start *nodev1.StartExecution, status *nodev1.ExecutionStatus) error {
	rt, err := tx.GetRuntime(plan.w.GetWorkspaceId(), true)
	if err != nil {
		return err
	}
	continuity, reason := ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED, ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_UNSPECIFIED
	switch {
	case status.GetLayerCreated() && rt.GetStarts() == 0:
		continuity, reason = ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET, ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_FIRST_START
	case status.GetLayerCreated():
		continuity, reason = ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET, ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_LAYER_UNAVAILABLE
	}
	rt.InstanceId, rt.NodeId, rt.BootId = start.GetInstanceId(), nodeID, start.GetBootId()
	rt.Starts++
	if c := status.GetLayerCapacityBytes(); c != 0 {
		rt.LayerCapacityBytes = c // what the layer has, and reserves in its pool
	}
	rt.LayerTemplate = plan.template.GetRoot().GetDigest()
	rt.LayerUnconfirmed = false
	rt.LayerContinuity, rt.LayerResetReason = continuity, reason
	rt.AppliedEgresses = nil
	if status.GetAppliedNetworkPolicyRevision() != 0 {
		rt.AppliedEgresses = start.GetEgresses()
	}
	if err := tx.PutRuntime(rt); err != nil {
		return err
	}
	if plan.volume != nil {
		if err := s.volumes.Update(tx, plan.volume.GetVolumeId(), func(v *ctrlv1.Volume) { v.State = ctrlv1.VolumeState_VOLUME_STATE_ATTACHED }); err != nil {
			return err
		}
	}
	report := startReport(start, status)
	if err := s.volumeObserved(tx, plan.w.GetSpec(), report); err != nil {
		return err
	}
	return s.setWorkspace(tx, plan.w.GetWorkspaceId(), func(w *ctrlv1.Workspace) {
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
		// What the start bound (planFor stored it too), and nothing else
		// of the plan's copy: an update admitted while the Workspace was
		// starting (memory, the layer's capacity, the network policy) is
		// in the stored spec, with its revision, and stays.
		p := plan.w.GetSpec()
		w.Spec.Template, w.Spec.LaunchRef, w.Spec.LaunchBindingVersion = p.GetTemplate(), p.GetLaunchRef(), p.GetLaunchBindingVersion()
		w.NetworkPolicyStatus = nil
		if rev := status.GetAppliedNetworkPolicyRevision(); rev != 0 {
			w.NetworkPolicyStatus = &ctrlv1.NetworkPolicyStatus{AppliedRevision: rev, AppliedAt: timestamppb.New(s.now()), Egresses: egressStatuses(start.GetEgresses()),
				Resolvers: resolverStatuses(start.GetResolvers())}
		}
		w.Generation++
		w.Reestablish = reestablishAfter(w.GetGeneration())
		w.Failure = nil
		w.Delivery = nil // absent once the Workspace is available
		w.GuestObservation = &ctrlv1.GuestObservation{ObservedAt: timestamppb.New(s.now()), Condition: ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING}
		if report != nil {
			// The node's report with its answer: the first observation.
			s.observed(w, report)
		}
	})
}

// failStart records a create or start that failed: the Workspace is FAILED
// and holds no execution, so it can be started again. also runs in the
// same transaction.
func (s *Service) failStart(ctx context.Context, wk *command.Work, failure *ctrlv1.WorkspaceFailure, also ...func(tx *store.Tx) error) error {
	return wk.Fail(ctx, failure, func(tx *store.Tx) error {
		id := wk.Command().GetTargetId()
		if err := tx.ReleaseAllocation(id, instanceID(id, wk.Command().GetCommandId())); err != nil {
			return err
		}
		for _, f := range also {
			if err := f(tx); err != nil {
				return err
			}
		}
		if err := s.endRestore(tx, wk, false); err != nil {
			return err
		}
		return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) {
			w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
			w.Failure = failure
			w.NetworkPolicyStatus = nil
			w.EgressObservations, w.ResolverObservations = nil, nil
			if d := w.GetDelivery(); d != nil {
				// The start failed with its artifacts still arriving.
				d.Reason = ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED
				d.Message = failure.GetMessage()
				d.ObservedAt = timestamppb.New(s.now())
			}
		})
	})
}

// reestablishAfter is what a caller sets up again after the start of
// execution generation: nothing after the first; after any later one
// everything that lived with the execution that ended: its data-plane
// sessions and processes, and the credentials and login state a caller set
// up in the guest's memory or its NONE tier (/tmp, /run).
func reestablishAfter(generation uint64) []ctrlv1.ReestablishRequirement {
	if generation <= 1 {
		return nil
	}
	return []ctrlv1.ReestablishRequirement{
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_DATA_PLANE_SESSION,
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_CREDENTIAL,
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_PROCESS,
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_LOGIN_STATE,
	}
}

// startFailure is what the node said of a failed start (why, and what it
// left of the writable layer), or nil when the node said nothing.
func startFailure(answer *fleet.Answer) *nodev1.StartFailure {
	said := &nodev1.StartFailure{}
	if answer.Result == nil || !answer.Result.MessageIs(said) || answer.Result.UnmarshalTo(said) != nil {
		return nil
	}
	return said
}

// forgetRemovedLayer follows a failed start's node (StartFailure). The
// layer no longer exists when the start made it and removed it again, or
// when the start never came to a layer no start has made yet
// (layer_unconfirmed): it is then no longer placed, leaving its pool's
// objects and reservation, and the next start places a new one as a first
// start does. A start that came to the layer and kept it confirms it.
// Without a StartFailure (ctrl failed the operation itself: the node never
// answered) the layer may or may not exist, and stays as it was.
func forgetRemovedLayer(tx *store.Tx, start *nodev1.StartExecution, answer *fleet.Answer) error {
	said := &nodev1.StartFailure{}
	if answer.Result == nil || !answer.Result.MessageIs(said) {
		return nil
	}
	if err := answer.Result.UnmarshalTo(said); err != nil {
		return err
	}
	rt, err := tx.GetRuntime(WorkspaceOf(start.GetInstanceId()), true)
	if err != nil || rt.GetLayerPool() != start.GetLayer().GetStoragePool() {
		return err
	}
	switch {
	case said.GetLayerRemoved(), said.GetLayerUntouched() && rt.GetLayerUnconfirmed():
		rt.LayerPool, rt.LayerCapacityBytes, rt.LayerTemplate, rt.LayerUnconfirmed = "", 0, "", false
	case !said.GetLayerUntouched():
		rt.LayerUnconfirmed = false // the node came to it and kept it
	default:
		return nil
	}
	return tx.PutRuntime(rt)
}

// resolvedEgresses are the Egresses policy forwards through as ctrl holds
// them (passwords included), for the node that enforces it. Admission
// checked they exist, and one a policy names cannot be deleted.
func resolvedEgresses(tx *store.Tx, policy *ctrlv1.NetworkPolicy) ([]*nodev1.ResolvedEgress, error) {
	var out []*nodev1.ResolvedEgress
	for _, e := range policy.GetEgresses() {
		r, err := tx.GetEgress(e.GetEgressId(), false)
		if err != nil {
			return nil, fmt.Errorf("egress %s of the network policy: %w", e.GetEgressId(), err)
		}
		out = append(out, &nodev1.ResolvedEgress{EgressId: e.GetEgressId(), Revision: r.Egress.GetRevision(), Spec: r.Egress.GetSpec()})
	}
	return out, nil
}

// egressStatuses say, for each Egress of a policy the node confirmed, the
// revision its new connections use: the one ctrl sent with it.
func egressStatuses(sent []*nodev1.ResolvedEgress) []*ctrlv1.NetworkPolicyEgressStatus {
	var out []*ctrlv1.NetworkPolicyEgressStatus
	for _, e := range sent {
		out = append(out, &ctrlv1.NetworkPolicyEgressStatus{EgressId: e.GetEgressId(), AppliedRevision: e.GetRevision()})
	}
	return out
}
