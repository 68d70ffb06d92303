package fleet

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// HeaderNodeID carries the node_id on every call after Enroll.
const HeaderNodeID = "Kibotos-Node-Id"

type sessionStream = connect.BidiStream[nodev1.SessionRequest, nodev1.SessionResponse]

// session is one live control session held by this replica.
type session struct {
	nodeID      string
	incarnation uint64
	connectedAt time.Time
	stream      *sessionStream

	sendMu sync.Mutex

	mu sync.Mutex
	// A session's work besides reading the node's messages runs in
	// goroutines started when there is some and ended once there is none
	// (workers.go): its sender (sendOperations) while it has operations or
	// a clock probe to send (sending), its writer (writeObservations)
	// while an observation waits to be written (writing). workCtx is the
	// context they run in: nil before the welcome is sent and once the
	// handler ends; workers counts them. An idle session so keeps one
	// goroutine, the handler reading its messages: at 10,000 nodes every
	// goroutine a session keeps is 10,000 stacks each garbage collection
	// scans (docs/PERFORMANCE.md).
	sending bool
	writing bool
	workCtx context.Context
	workers sync.WaitGroup
	// probeDue asks the sender for a clock probe; probeTimer sets it, armed
	// again after each probe sent (probe).
	probeDue   bool
	probeTimer *time.Timer
	// interval is how often the node was last asked to report (its
	// welcome, then SessionSchedule): what its silence is judged by.
	interval time.Duration
	probes   map[uint64]time.Time // probe_id → when it was sent
	nextID   uint64
	sent     map[string]bool // operation_ids sent on this session
	reread   bool
	outbox   []*storev1.NodeOperation
	// clock is the latest clock measurement; clockWritten says whether one
	// was written in this session, and writtenExceeds what it said.
	clock          *operatorv1.NodeClockObservation
	clockWritten   bool
	writtenExceeds bool

	// artifacts is what the node's cache held as this session last wrote
	// it; artifactsWritten says whether it wrote it yet (the rows an
	// earlier session left may be old).
	artifacts        []*nodev1.CachedArtifact
	artifactsWritten bool

	// obs is what the session last wrote of the node's observations and
	// its newest sample (liveness.go).
	obs observed

	// latest is the newest observation not written yet, for the writer.
	latest *nodev1.NodeObservation

	// dataToken authorises ctrl's calls to the node's data endpoint while
	// this session lasts.
	dataToken string

	// end ends the session from ctrl's side, with the error the node is
	// answered (its admission ended).
	end context.CancelCauseFunc
}

func (s *session) send(msg *nodev1.SessionResponse) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(msg)
}

// Session serves one node's control session until it ends.
//
// interrupt must end a Receive on stream that waits, from any goroutine
// (the api package sets a read deadline in the past).
func (f *Fleet) Session(ctx context.Context, stream *sessionStream, interrupt func()) error {
	nodeID, err := f.authenticate(ctx, stream.RequestHeader().Get("Authorization"), stream.RequestHeader().Get(HeaderNodeID))
	if err != nil {
		return err
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetNodeId() != nodeID {
		return apierr.Invalid("hello", "the first message of a session must be a hello from node %s", nodeID)
	}
	s := &session{
		nodeID: nodeID, incarnation: hello.GetIncarnation(), connectedAt: f.now(), stream: stream,
		probes: map[uint64]time.Time{}, sent: map[string]bool{},
		dataToken: "kbd_" + hex.EncodeToString(randomBytes(24)),
	}
	s.obs.heardAt = s.connectedAt
	// The interval is asked for the sessions held once this one is; the
	// hello's write takes its lease from it.
	s.interval = f.cfg.observationInterval(f.sessionsHeld() + 1)
	if err := f.register(ctx, s, hello); err != nil {
		return err
	}
	ctx, s.end = context.WithCancelCause(ctx)
	defer s.end(nil)
	f.attach(s)
	defer f.detach(ctx, s)
	f.log.InfoContext(ctx, "node session opened", "node_id", nodeID, "incarnation", s.incarnation)

	if err := s.send(&nodev1.SessionResponse{Message: &nodev1.SessionResponse_Welcome{Welcome: &nodev1.SessionWelcome{
		ObservationInterval: durationpb.New(s.interval), CtrlTime: timestamppb.New(f.now()), DataToken: s.dataToken,
		ObservationInClockReply: true,
	}}}); err != nil {
		return err
	}
	_ = f.waker.WakeWaiting(ctx) // commands waiting for a node may go on now

	// A worker must be done before the handler returns: after that the
	// stream is closed and may not be written.
	ctx, cancel := context.WithCancel(ctx)
	defer f.closeWorkers(s, cancel)
	f.openWorkers(ctx, s)
	defer f.watchSilence(ctx, s)()
	// A session ctrl ends (RetireNode, a revocation, silence) must not
	// wait for the node's next message: interrupt ends the Receive the
	// handler waits in.
	defer context.AfterFunc(ctx, interrupt)()
	return f.receive(ctx, s)
}

// receive reads the node's messages and handles each, in order, in the
// handler's goroutine, until the stream ends, a message ends the session,
// or ctrl ends it (ctx), and answers what the handler returns. Handling
// them in a goroutine of their own would cost a goroutine wake-up a
// message, most of what an idle fleet's message costs ctrl, and reading
// them in one would keep a second goroutine a session
// (docs/PERFORMANCE.md). No message is handled once ctrl ended the
// session.
func (f *Fleet) receive(ctx context.Context, s *session) error {
	for {
		msg, err := s.stream.Receive()
		if ctx.Err() != nil {
			if cause := context.Cause(ctx); connect.CodeOf(cause) == connect.CodePermissionDenied {
				return cause
			}
			return nil
		}
		if err != nil {
			if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
				return nil
			}
			return err
		}
		s.heard(f.now())
		err = f.handle(ctx, s, msg)
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			return err
		}
		if err != nil {
			f.log.WarnContext(ctx, "node session message", "node_id", s.nodeID, "err", err)
		}
	}
}

// endSession ends the session this replica holds for node, answering the
// node with why. Another replica's session ends at the node's next
// message (touch refuses it).
func (f *Fleet) endSession(nodeID string, why error) {
	f.mu.Lock()
	s := f.sessions[nodeID]
	f.mu.Unlock()
	if s != nil {
		s.end(why)
	}
}

// AuthenticateNode checks a node call's credentials (a call beside the
// session, such as UploadTransferPart) and returns the node's id.
func (f *Fleet) AuthenticateNode(ctx context.Context, header http.Header) (string, error) {
	return f.authenticate(ctx, header.Get("Authorization"), header.Get(HeaderNodeID))
}

func (f *Fleet) authenticate(ctx context.Context, authorization, nodeID string) (string, error) {
	credential, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || nodeID == "" {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("a node session needs Authorization: Bearer <credential> and "+HeaderNodeID))
	}
	var hash string
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		hash, err = tx.NodeCredential(nodeID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) || (err == nil && subtle.ConstantTimeCompare([]byte(hash), []byte(hashSecret(credential))) != 1) {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("unknown node credential: enroll again"))
	}
	return nodeID, err
}

// register records the hello: incarnation, resources, pools, capabilities.
func (f *Fleet) register(ctx context.Context, s *session, hello *nodev1.NodeHello) error {
	var written *operatorv1.NodeObservationSummary
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		n, err := tx.GetNode(s.nodeID, true)
		if err != nil {
			return err
		}
		switch {
		case n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED:
			return notAdmitted(n)
		case hello.GetIncarnation() < n.GetIncarnation():
			return apierr.Precondition(nil, "incarnation %d is older than the registered %d", hello.GetIncarnation(), n.GetIncarnation())
		case n.GetIsolated() && hello.GetIncarnation() == n.GetIncarnation():
			// The operator declared this incarnation unable to write its
			// pools; only a new one, which vouches for nothing the old one
			// ran, may come back.
			return apierr.Precondition(nil, "incarnation %d of node %s is isolated: the node must start a new incarnation", n.GetIncarnation(), s.nodeID)
		}
		now := f.now()
		if hello.GetIncarnation() > n.GetIncarnation() && n.GetIsolated() {
			// A node that comes back with a new incarnation after isolation
			// is admitted again: it no longer vouches for what it ran.
			n.Isolated = false
			n.IsolatedAt = nil
		}
		n.Incarnation = hello.GetIncarnation()
		n.Status = operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_SYNCING
		n.Session = &operatorv1.NodeSessionSummary{
			Live: true, ConnectedAt: timestamppb.New(s.connectedAt), LastSeenAt: timestamppb.New(now), AgentVersion: hello.GetAgentVersion(),
			LiveUntil: timestamppb.New(now.Add(f.lease(s.interval))),
		}
		version := f.firstVersion(n.GetObservation().GetObservationVersion(), s.nodeID)
		n.Observation = &operatorv1.NodeObservationSummary{
			ObservationVersion: version, ObservedAt: timestamppb.New(now), Capabilities: hello.GetCapabilities(),
			Resources: &operatorv1.NodeResources{
				CpuMillis: hello.GetResources().GetCpuMillis(), MemoryBytes: hello.GetResources().GetMemoryBytes(), DiskBytes: hello.GetResources().GetDiskBytes(),
			},
			ExecutionCount: uint32(len(hello.GetInstanceIds())),
		}
		n.StoragePools = attachments(s.nodeID, hello.GetStoragePools(), now)
		if err := unavailableIfLost(tx, n); err != nil {
			return err
		}
		n.RegistrationVersion++
		n.UpdatedAt = timestamppb.New(now)
		if err := tx.PutNode(n); err != nil {
			return err
		}
		written = n.Observation
		return tx.SetNodeData(s.nodeID, hello.GetDataEndpoint(), s.dataToken)
	})
	if err == nil {
		s.summarized(written)
	}
	return err
}

func attachments(nodeID string, pools []*nodev1.StoragePoolDeclaration, now time.Time) []*operatorv1.StoragePoolAttachment {
	var out []*operatorv1.StoragePoolAttachment
	for _, p := range pools {
		out = append(out, &operatorv1.StoragePoolAttachment{
			NodeId: nodeID, StoragePool: p.GetStoragePool(), DefaultPool: p.GetDefaultPool(), Available: p.GetAvailable(),
			FilesystemSizeBytes: p.FilesystemSizeBytes, FilesystemFreeBytes: p.FilesystemFreeBytes, ObservedAt: timestamppb.New(now),
		})
	}
	return out
}

// unavailableIfLost marks unavailable the pools of n declared lost: a lost
// pool's id never comes back into use, even when its node still declares
// it with the original disk.
func unavailableIfLost(tx *store.Tx, n *operatorv1.NodeRegistration) error {
	lost, err := tx.LostPools()
	if err != nil {
		return err
	}
	markLostPools(n, lost)
	return nil
}

// markLostPools marks unavailable the pools of n in lost.
func markLostPools(n *operatorv1.NodeRegistration, lost map[string]bool) {
	for _, a := range n.GetStoragePools() {
		if lost[a.GetStoragePool()] {
			a.Available = false
		}
	}
}

func (f *Fleet) attach(s *session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[s.nodeID] = s
}

// detach records the lost session, unless a newer one replaced it.
func (f *Fleet) detach(ctx context.Context, s *session) {
	f.mu.Lock()
	if f.sessions[s.nodeID] == s {
		delete(f.sessions, s.nodeID)
	}
	f.mu.Unlock()
	err := f.store.Tx(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		n, err := tx.GetNode(s.nodeID, true)
		if err != nil {
			return err
		}
		if !n.GetSession().GetConnectedAt().AsTime().Equal(s.connectedAt) {
			return nil
		}
		sessionLost(n, f.now())
		// The summary served from memory is kept: the next session's
		// versions go on from it.
		if sum := s.summaryShown(); sum.GetObservationVersion() > n.GetObservation().GetObservationVersion() {
			n.Observation = sum
		}
		return tx.PutNode(n)
	})
	if err != nil {
		f.log.WarnContext(ctx, "record lost node session", "node_id", s.nodeID, "err", err)
	}
	f.log.InfoContext(ctx, "node session closed", "node_id", s.nodeID)
}

// firstVersion is the observation_version of a new session of node
// whose registration stores version stored. A session hands out versions
// in memory between its writes (an observation that changes nothing
// placement reads is written only at the refresh); they are lost with it
// when ctrl stops, or when the node opens a new session before the old
// one's end is written. The new session goes on past every version the
// old one could have handed out unwritten, and past one this replica
// still holds, so that a version never goes back. Versions have gaps.
func (f *Fleet) firstVersion(stored uint64, node string) uint64 {
	unwritten := uint64(f.refresh()/max(f.cfg.ObservationInterval, time.Second)) + 2
	v := stored + unwritten
	f.mu.Lock()
	old := f.sessions[node]
	f.mu.Unlock()
	if old != nil {
		v = max(v, old.summaryShown().GetObservationVersion()+1)
	}
	return v
}

// sessionLost records in n that its session ended at now.
func sessionLost(n *operatorv1.NodeRegistration, now time.Time) {
	n.Session.Live = false
	n.Session.DisconnectedAt = timestamppb.New(now)
	n.Session.Clock = nil
	n.Session.LiveUntil = nil
	n.Status = operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE
	n.HostUsage = nil
	n.MemoryTight = nil
	n.UpdatedAt = timestamppb.New(now)
}

// EndOrphanedSessions records every session the database says is live as
// lost. Call it only at the start of a ctrl that is its database's only
// user (store.Exclusive): the sessions are those of a ctrl that died, and
// their nodes open new ones with this ctrl. Without it they would count
// as live until their leases pass, which the registration refresh makes a
// minute and more (15 on SQLite).
func (f *Fleet) EndOrphanedSessions(ctx context.Context) error {
	now := f.now()
	return f.store.Tx(ctx, func(tx *store.Tx) error {
		for after := ""; ; {
			nodes, err := tx.ListNodes(after, 500)
			if err != nil || len(nodes) == 0 {
				return err
			}
			for _, n := range nodes {
				if n.GetSession().GetLive() {
					sessionLost(n, now)
					if err := tx.PutNode(n); err != nil {
						return err
					}
				}
			}
			after = nodes[len(nodes)-1].GetNodeId()
		}
	})
}

// Notify tells the session of node (if this replica holds it) that it has
// operations to send.
func (f *Fleet) Notify(nodeID string) {
	f.wakeSender(nodeID, func(s *session) { s.reread = true })
}

// deliver hands the session of op's node op, recorded and committed, to
// send without reading the node's pending operations from the database
// (a transaction per placement). A session that starts later reads it
// there.
func (f *Fleet) deliver(op *storev1.NodeOperation) {
	f.wakeSender(op.GetNodeId(), func(s *session) { s.outbox = append(s.outbox, op) })
}

// handle applies one message from the node.
func (f *Fleet) handle(ctx context.Context, s *session, msg *nodev1.SessionRequest) error {
	switch m := msg.GetMessage().(type) {
	case *nodev1.SessionRequest_Observation:
		f.observe(ctx, s, m.Observation)
		return nil
	case *nodev1.SessionRequest_ClockReply:
		err := f.clockReply(ctx, s, m.ClockReply)
		if o := m.ClockReply.GetObservation(); o != nil {
			// Measured first: the observation's write carries the clock.
			f.observe(ctx, s, o)
		}
		return err
	case *nodev1.SessionRequest_CommandResult:
		return f.operationAnswered(ctx, s, m.CommandResult)
	case *nodev1.SessionRequest_ExecutionProgress:
		f.executions.ExecutionProgress(ctx, s.nodeID, m.ExecutionProgress)
		return nil
	case *nodev1.SessionRequest_CopyProgress:
		f.moves.CopyProgress(ctx, s.nodeID, m.CopyProgress)
		return nil
	case *nodev1.SessionRequest_Hello:
		return errors.New("a second hello on one session")
	}
	return fmt.Errorf("unknown session message %T", msg.GetMessage())
}

// observe hears one observation. Executions that ended are applied at
// once (an ended execution changes its Workspace's state). Its sample is
// kept in memory; when something placement reads changed or a refresh is
// due (unwritten), the registration, with the guest observations of the
// running executions, is written by the session's observation writer,
// newest first: an observation that arrives before the previous one was
// written replaces it. The session's other messages (a node's answers
// above all) never wait behind the fleet's observation writes, and the
// writes waiting at any time are at most one per session. An observation
// with nothing to write starts no writer: at 10,000 nodes waking one for
// each was 2,000 goroutine wake-ups a second.
func (f *Fleet) observe(ctx context.Context, s *session, o *nodev1.NodeObservation) {
	for _, r := range o.GetExecutions() {
		if !r.GetRunning() {
			f.executions.ExecutionEnded(ctx, s.nodeID, r)
		}
	}
	now := f.now()
	s.sample(o, now)
	due := s.unwritten(o, now, f.refreshOf(s), f.answers.awaitedStarts(o.GetExecutions()))
	s.mu.Lock()
	// An observation waiting to be written is replaced by this one, due or
	// not, so that what is shown never runs ahead of what waits.
	if !due && s.latest == nil {
		s.mu.Unlock()
		s.shown(s.nextSummary(o, now))
		return
	}
	s.latest = o
	s.mu.Unlock()
	f.wakeWriter(s)
}

// writeObservation writes one observation into the node's registration,
// when it is due (observationDue): otherwise its sample is served from
// memory until a write is.
func (f *Fleet) writeObservation(ctx context.Context, s *session, o *nodev1.NodeObservation) error {
	now := f.now()
	// What the cache holds is written only when it changed: at 10,000
	// nodes observing every few seconds, rewriting it each time would
	// multiply the rows every batch writes.
	held := o.GetArtifacts()
	changed := s.artifactsChanged(held)
	due, reports, all, lazy := s.observationDue(o, now, f.refreshOf(s), f.answers.awaitedStarts(o.GetExecutions()))
	if !due && !changed {
		return nil
	}
	touch := f.touch
	if lazy && !changed {
		touch = f.touchLazily
	}
	notify := false
	var applied []*nodev1.ExecutionReport
	sum := s.nextSummary(o, now)
	err := touch(ctx, s, func(tx *store.Tx, n *operatorv1.NodeRegistration, now time.Time) error {
		// The first observation after the hello ends SYNCING once the
		// node's clock is measured (readyWith): there is no execution to
		// reconcile yet (the VM provider comes later).
		s.readyWith(n, true)
		n.HostUsage = hostUsage(o, now)
		n.MemoryTight = memoryTight(o)
		if len(o.GetStoragePools()) > 0 {
			n.StoragePools = attachments(s.nodeID, o.GetStoragePools(), now)
		}
		n.Observation = sum
		var err error
		if applied, notify, err = f.observeExecutions(tx, s.nodeID, reports); err != nil || !changed {
			return err
		}
		return tx.SetNodeArtifacts(s.nodeID, nodeArtifacts(held), now)
	})
	if err == nil {
		s.wrote(o, applied, all, now)
		s.shown(sum)
		if changed {
			s.mu.Lock()
			s.artifacts, s.artifactsWritten = held, true
			s.mu.Unlock()
		}
	}
	if notify {
		f.Notify(s.nodeID) // an operation was recorded for the node
	}
	return err
}

// observeExecutions hands running executions' reports to their domain, in
// the observation's transaction, and answers those it applied and whether
// it recorded an operation for the node. Ended executions are heard at
// once, in observe.
func (f *Fleet) observeExecutions(tx *store.Tx, nodeID string, reports []*nodev1.ExecutionReport) ([]*nodev1.ExecutionReport, bool, error) {
	var applied []*nodev1.ExecutionReport
	notify := false
	for _, r := range reports {
		ok, recorded, err := f.executions.ExecutionObserved(tx, nodeID, r)
		if err != nil {
			return nil, false, err
		}
		if ok {
			applied = append(applied, r)
		}
		notify = notify || recorded
	}
	return applied, notify, nil
}

// nodeArtifacts is a node's report of its cache as the store keeps it.
func nodeArtifacts(held []*nodev1.CachedArtifact) []store.NodeArtifact {
	out := make([]store.NodeArtifact, 0, len(held))
	for _, a := range held {
		out = append(out, store.NodeArtifact{Digest: a.GetDigest(), Complete: a.GetComplete(), DeliveredBytes: a.GetDeliveredBytes(), TotalBytes: a.GetTotalBytes()})
	}
	return out
}

// currentInterval is how often the node was last asked to report.
func (s *session) currentInterval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interval
}

// reschedule sends the node its observation interval for the sessions held
// now, when it differs from the one it has by a quarter or more. The
// session judges silence by the new one from then: longer, before the node
// hears it; shorter, while the node may still wait the old one, but the
// probe just sent is answered at once. A longer one outlasts the lease
// the registration was last written with, so the next observation (the
// probe's answer carries one) writes it with a lease for the new interval.
func (f *Fleet) reschedule(s *session) error {
	want := f.cfg.observationInterval(f.sessionsHeld())
	s.mu.Lock()
	have := s.interval
	if d := want - have; 4*d.Abs() < have {
		s.mu.Unlock()
		return nil
	}
	s.interval = want
	s.obs.leaseShort = s.obs.leaseShort || (want > have && !f.exclusive)
	s.mu.Unlock()
	return s.send(&nodev1.SessionResponse{Message: &nodev1.SessionResponse_Schedule{Schedule: &nodev1.SessionSchedule{
		ObservationInterval: durationpb.New(want),
	}}})
}

// clockReply measures the node's clock around one probe: offset is the node
// clock minus ctrl's at the middle of the round trip, uncertainty half the
// round trip.
func (f *Fleet) clockReply(ctx context.Context, s *session, r *nodev1.ClockReply) error {
	received := f.now()
	s.mu.Lock()
	sent, ok := s.probes[r.GetProbeId()]
	delete(s.probes, r.GetProbeId())
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("clock reply to unknown probe %d", r.GetProbeId())
	}
	clock := MeasureClock(sent, received, r.GetNodeTime().AsTime(), f.cfg.ClockTolerance)
	clock.Synchronization = operatorv1.NodeClockSynchronization(r.GetSynchronization())
	s.mu.Lock()
	s.clock = clock
	urgent := !s.clockWritten || clock.GetExceedsTolerance() != s.writtenExceeds
	s.mu.Unlock()
	if !urgent {
		return nil // written with the next observation
	}
	return f.touch(ctx, s, func(_ *store.Tx, n *operatorv1.NodeRegistration, _ time.Time) error {
		s.readyWith(n, s.observedIn(n))
		return nil
	})
}

// readyWith writes the session's latest clock measurement into n
// (writeClock) and, once the node has been observed in this session
// (observed), makes it READY: a node is placed on only once its clock is
// measured in this session, so a node whose clock drifted while it was
// away takes nothing before ctrl knows. (designed here)
func (s *session) readyWith(n *operatorv1.NodeRegistration, observed bool) {
	if s.writeClock(n) && observed {
		n.Status = operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY
	}
}

// observedIn says whether registration n, as its write read it, holds an
// observation of this session: the writes are serialized, so a clock
// write after an observation write sees it.
func (s *session) observedIn(n *operatorv1.NodeRegistration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return n.GetObservation().GetObservationVersion() > s.obs.helloVersion
}

// writeClock puts the session's latest clock measurement into n. A
// measurement is written at once only when it is the session's first or
// changes whether the node's clock is within tolerance (which placement
// reads); otherwise it waits for the next observation, so that clock probes
// cost no writes of their own. It reports whether the session has a
// measurement.
func (s *session) writeClock(n *operatorv1.NodeRegistration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clock == nil {
		return false
	}
	n.Session.Clock = s.clock
	s.clockWritten, s.writtenExceeds = true, s.clock.GetExceedsTolerance()
	return true
}

// MeasureClock computes a clock observation from one probe sent at sent and
// answered at received (ctrl's clock) with the node's time nodeTime.
func MeasureClock(sent, received, nodeTime time.Time, tolerance time.Duration) *operatorv1.NodeClockObservation {
	rtt := received.Sub(sent)
	uncertainty := rtt / 2
	offset := nodeTime.Sub(sent.Add(uncertainty))
	abs := offset
	if abs < 0 {
		abs = -abs
	}
	return &operatorv1.NodeClockObservation{
		Offset: durationpb.New(offset), Uncertainty: durationpb.New(uncertainty), MeasuredAt: timestamppb.New(received),
		ExceedsTolerance: abs-uncertainty > tolerance,
	}
}

// PollOperations notifies, every interval until ctx ends, the sessions
// this replica holds whose nodes have pending operations: those another
// replica recorded (its Notify reaches only its own sessions), and those
// a failed send left behind.
func (f *Fleet) PollOperations(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var nodes []string
		err := f.store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			nodes, err = tx.NodesWithPendingOperations()
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("poll pending node operations", "sweep", "node-operations", "err", err)
			}
			continue
		}
		for _, id := range nodes {
			f.Notify(id)
		}
	}
}

// operationAnswered hands a node's answer to the step waiting for it to
// record it (answerWaiters.offer), or else records it and wakes the
// command, in one transaction.
func (f *Fleet) operationAnswered(ctx context.Context, s *session, r *nodev1.CommandResult) error {
	failpoint.Hit(failpoint.AnswerReceived, r.GetOperationId())
	if f.answers.offer(s.nodeID, r, func() func() { return s.noteStartReport(r) }) {
		return nil
	}
	return f.recordAndHand(ctx, s.nodeID, r)
}

// recordAndHand records node's answer r and wakes its command, in one
// transaction, then hands the operation answered to a step waiting for
// it, or kicks the runner.
func (f *Fleet) recordAndHand(ctx context.Context, node string, r *nodev1.CommandResult) error {
	var answered *storev1.NodeOperation
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		answered, err = f.recordAnswer(tx, node, r, true)
		return err
	})
	if err == nil && answered != nil {
		failpoint.Hit(failpoint.AnswerRecorded, answered.GetCommandId())
		if !f.answers.answered(answered) {
			f.waker.Kick()
		}
	}
	return err
}

// recordAnswer records node's answer r to its operation in tx and, when
// wake is set, wakes the command (a step that records the answer itself
// holds it). It answers the operation as recorded, or nil when it was
// answered already or is not node's.
func (f *Fleet) recordAnswer(tx *store.Tx, node string, r *nodev1.CommandResult, wake bool) (*storev1.NodeOperation, error) {
	op, err := tx.GetNodeOperation(r.GetOperationId(), true)
	if err != nil {
		return nil, err
	}
	if op.GetNodeId() != node || op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING {
		return nil, nil // answered already, or not this node's
	}
	answerIn(op, r, f.now())
	if err := tx.PutNodeOperation(op); err != nil {
		return nil, err
	}
	if !wake {
		return op, nil
	}
	// The wake commits with the answer: woken after the commit, a crash
	// between the two left the command asleep until its next attempt, up
	// to 30 s later (the commit-point test found it).
	return op, tx.WakeCommand(op.GetCommandId(), f.now())
}

// answerIn sets node's answer r in op.
func answerIn(op *storev1.NodeOperation, r *nodev1.CommandResult, now time.Time) {
	op.State = storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED
	if r.GetCode() != 0 {
		op.State = storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED
	}
	op.Code, op.Message, op.Result = r.GetCode(), r.GetMessage(), r.GetResult()
	op.AnsweredAt = timestamppb.New(now)
}

// StartOperation records an operation for node in tx; the node's session
// sends it (again after every reconnect) until the node answers. Call Notify
// after the transaction commits, or hand the operation it returns to
// deliver.
func StartOperation(tx *store.Tx, now time.Time, operationID, nodeID, commandID string, body *anypb.Any) (*storev1.NodeOperation, error) {
	op, _, err := startOperation(tx, now, operationID, nodeID, commandID, body)
	return op, err
}

// startOperation is StartOperation, saying whether it inserted the
// operation (false: one with its id was recorded before).
func startOperation(tx *store.Tx, now time.Time, operationID, nodeID, commandID string, body *anypb.Any) (*storev1.NodeOperation, bool, error) {
	op := &storev1.NodeOperation{
		OperationId: operationID, NodeId: nodeID, CommandId: commandID,
		State: storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING, Body: body, CreatedAt: timestamppb.New(now),
		// The node's span of the operation joins the trace of the
		// command step recording it.
		Traceparent: command.OperationTraceparent(tx),
		RequestId:   telemetry.RequestID(tx.Context()),
	}
	inserted, err := tx.InsertNodeOperation(op)
	return op, inserted, err
}

// FetchArtifact streams an artifact to an authenticated node.
func (f *Fleet) FetchArtifact(ctx context.Context, header http.Header, req *nodev1.FetchArtifactRequest, send func(*nodev1.FetchArtifactResponse) error) error {
	if _, err := f.authenticate(ctx, header.Get("Authorization"), header.Get(HeaderNodeID)); err != nil {
		return err
	}
	path, err := f.artifacts.ArtifactPath(req.GetDigest())
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return err
	}
	if err != nil {
		return connect.NewError(connect.CodeNotFound, err)
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return err
	}
	total := uint64(info.Size())
	if req.GetOffset() > total {
		return apierr.Invalid("offset", "is beyond the artifact's %d bytes", total)
	}
	if _, err := file.Seek(int64(req.GetOffset()), io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	offset := req.GetOffset()
	for {
		n, err := file.Read(buf)
		if n > 0 {
			if serr := send(&nodev1.FetchArtifactResponse{Offset: offset, Data: buf[:n], TotalBytes: total}); serr != nil {
				return serr
			}
			offset += uint64(n)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// NodeLive reports whether node's control session is live now (Live). A
// session this replica holds is live without a read: the data plane asks
// on every call.
func (f *Fleet) NodeLive(ctx context.Context, nodeID string) (live bool, err error) {
	if f.holds(nodeID) {
		return true, nil
	}
	err = f.store.Snapshot(ctx, func(tx *store.Tx) error {
		n, err := tx.GetNode(nodeID, false)
		live = err == nil && f.Live(n, f.now())
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	return live, err
}

// NodeData is how ctrl reaches node's data endpoint: its URL and the token
// of its current session.
func (f *Fleet) NodeData(ctx context.Context, nodeID string) (endpoint, token string, err error) {
	err = f.store.Snapshot(ctx, func(tx *store.Tx) error {
		endpoint, token, err = tx.NodeData(nodeID)
		return err
	})
	return endpoint, token, err
}
