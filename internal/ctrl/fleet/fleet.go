// Package fleet is ctrl's side of the nodes: enrollment grants, node
// registrations, the control sessions nodes hold on the node endpoint, and
// the node operations commands hand them.
package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/store"
)

// Waker is told when something commands may wait for has happened.
type Waker interface {
	Wake(ctx context.Context, commandIDs ...string) error
	WakeWaiting(ctx context.Context) error
	// Kick makes the runner look for due commands now: a transaction
	// that woke some (store.Tx.WakeCommand) committed.
	Kick()
}

// Config tunes the fleet.
type Config struct {
	// ObservationInterval is how often a node reports while the sessions
	// this replica holds are few enough for MaxObservationRate; a session
	// silent for three of its intervals (at least 10 s) is ended.
	ObservationInterval time.Duration
	// MaxObservationRate is how many observations a second this replica
	// asks of the nodes whose sessions it holds, at most, as Nomad's
	// max_heartbeats_per_second: with more sessions than
	// ObservationInterval allows within it, every node is asked to report
	// less often (interval × sessions ÷ (rate × interval)), and its clock
	// probed less often by the same factor; as sessions end, more often
	// again. Zero is DefaultMaxObservationRate.
	MaxObservationRate float64
	// RegistrationRefresh is the longest a live session's registration
	// goes unwritten while nothing placement reads changes (its status,
	// pools, memory tightness, clock tolerance, cache, executions' reports);
	// zero is twelve observation intervals (a minute by default), or 15
	// minutes on SQLite (the database's only user: Fleet.refresh). Between
	// writes the replica holding the session serves its newest sample
	// (host_usage, last_seen_at, clock) from memory.
	RegistrationRefresh time.Duration
	// ClockProbeInterval is how often ctrl measures a node's clock.
	ClockProbeInterval time.Duration
	// ClockTolerance is the allowed clock skew; a node beyond it receives no
	// new placement.
	ClockTolerance time.Duration
	// PlacementTimeout is how long a create or start waits for a node to
	// take it (one coming back, room freeing) before it fails as a
	// placement that found no node; zero is DefaultPlacementTimeout.
	PlacementTimeout time.Duration
	// UnobservedAfter is how long a node may be without a live control
	// session before the Workspaces running on it read UNKNOWN
	// (unobserved); zero is DefaultUnobservedAfter.
	UnobservedAfter time.Duration
}

// DefaultUnobservedAfter is the UnobservedAfter a zero Config gets: long
// enough for a node to open a new session after ctrl restarted or its
// connection was cut (it retries every 5 s at most), so that neither
// turns every Workspace UNKNOWN.
const DefaultUnobservedAfter = 15 * time.Second

// DefaultMaxObservationRate is the MaxObservationRate a zero Config gets:
// up to 2,500 nodes report every 5 s (the default interval); 10,000 every
// 20 s, and their clocks are probed every 40 s. Receiving a message cost
// ctrl about 70 µs of CPU on the benchmark machine (docs/PERFORMANCE.md,
// the idle fleet), so this budget keeps an idle fleet of any size near a
// tenth of a core.
const DefaultMaxObservationRate = 500

// DefaultPlacementTimeout is the PlacementTimeout a zero Config gets.
const DefaultPlacementTimeout = time.Minute

// DefaultConfig is what ctrl runs with unless told otherwise.
var DefaultConfig = Config{
	ObservationInterval: 5 * time.Second,
	ClockProbeInterval:  10 * time.Second,
	ClockTolerance:      500 * time.Millisecond,
	PlacementTimeout:    DefaultPlacementTimeout,
}

// Fleet is the nodes ctrl knows.
type Fleet struct {
	store *store.Store
	waker Waker
	log   *slog.Logger
	cfg   Config
	now   func() time.Time

	mu       sync.Mutex
	sessions map[string]*session // node_id → the session this replica holds

	// exclusive: this process is the database's only user (SQLite), so
	// every session the database calls live is one this process holds
	// (it ended those of a process before it at start, and writes each of
	// its own lost as it ends): liveness needs no periodic write.
	exclusive bool

	writes  registrationWrites
	answers answerWaiters

	artifacts  Artifacts
	executions Executions
	moves      Moves
	metrics    *metrics.Metrics
}

// Artifacts finds the file of an artifact by digest.
type Artifacts interface {
	ArtifactPath(digest string) (string, error)
}

// Executions is the domain whose executions run on nodes: it hears what
// nodes report about them, and lets go of what an isolated node held.
type Executions interface {
	// ExecutionEnded is called for an execution that ended without a stop
	// command (the guest powered off, the host killed it).
	ExecutionEnded(ctx context.Context, nodeID string, report *nodev1.ExecutionReport)
	// ExecutionObserved is called for each running execution's report, in
	// the transaction that writes the node's observation (which many nodes'
	// observations share). It reports whether it recorded an operation for
	// the node. Only a database error is returned.
	// applied says the report was recorded as its Workspace's current
	// execution's (not one whose start is not answered yet, nor a stray):
	// until one is, the fleet hands the same report in again.
	ExecutionObserved(tx *store.Tx, nodeID string, report *nodev1.ExecutionReport) (applied, notify bool, err error)
	// ExecutionProgress is called as a starting execution's artifacts
	// arrive on the node.
	ExecutionProgress(ctx context.Context, nodeID string, progress *nodev1.ExecutionProgress)
	// ReleaseNode releases in tx every execution charged to nodeID, with
	// the use rights of the Volumes and writable layers they held, and
	// moves their Workspaces to FAILED with failure. interrupted are the
	// unfinished commands whose operations on the node the isolation
	// failed: a Workspace one of them was starting there fails too.
	ReleaseNode(tx *store.Tx, nodeID string, interrupted []*store.CommandRow, failure *ctrlv1.WorkspaceFailure) (Released, error)
}

// Released counts what ReleaseNode let go of.
type Released struct {
	Volumes, RetainedLayers, Workspaces uint64
}

// Moves is the domain of moves between storage pools: it hears how far
// the nodes' block file copies have come.
type Moves interface {
	CopyProgress(ctx context.Context, nodeID string, p *nodev1.CopyProgress)
}

// Deps are what a Fleet serves besides its nodes. Executions and Moves
// make domains that need the Fleet itself (they place on it, their nodes
// copy): New calls them, so the Fleet it returns is whole. A zero field is
// a fleet of the nodes alone, for tests of the fleet: it serves no
// artifacts (FetchArtifact is unimplemented), has no executions to hear
// about (reports are dropped, an isolation is refused) and drops copy
// progress.
type Deps struct {
	Artifacts  Artifacts
	Executions func(*Fleet) Executions
	Moves      func(*Fleet) Moves
	// Metrics counts the fleet's placements and observation batches; nil
	// counts nothing.
	Metrics *metrics.Metrics
}

// New makes a Fleet with its deps.
func New(s *store.Store, waker Waker, log *slog.Logger, cfg Config, deps Deps) *Fleet {
	if cfg.MaxObservationRate <= 0 {
		cfg.MaxObservationRate = DefaultMaxObservationRate
	}
	if cfg.PlacementTimeout == 0 {
		cfg.PlacementTimeout = DefaultPlacementTimeout
	}
	if cfg.UnobservedAfter == 0 {
		cfg.UnobservedAfter = DefaultUnobservedAfter
	}
	f := &Fleet{store: s, waker: waker, log: log, cfg: cfg, now: time.Now, sessions: map[string]*session{},
		artifacts: deps.Artifacts, executions: noExecutions{}, moves: noMoves{}, metrics: deps.Metrics,
		exclusive: s.Exclusive()}
	if f.artifacts == nil {
		f.artifacts = noArtifacts{}
	}
	if deps.Executions != nil {
		f.executions = deps.Executions(f)
	}
	if deps.Moves != nil {
		f.moves = deps.Moves(f)
	}
	return f
}

// noMoves is a fleet with no moves: copy progress is dropped.
type noMoves struct{}

func (noMoves) CopyProgress(context.Context, string, *nodev1.CopyProgress) {}

// noArtifacts is a fleet that serves no artifacts.
type noArtifacts struct{}

func (noArtifacts) ArtifactPath(string) (string, error) {
	return "", connect.NewError(connect.CodeUnimplemented, errors.New("this ctrl serves no artifacts"))
}

// noExecutions is a fleet with no domain of executions: what nodes report
// of executions is dropped, and a node is not isolated (its executions
// could not be released).
type noExecutions struct{}

func (noExecutions) ExecutionEnded(context.Context, string, *nodev1.ExecutionReport)      {}
func (noExecutions) ExecutionProgress(context.Context, string, *nodev1.ExecutionProgress) {}
func (noExecutions) ExecutionObserved(*store.Tx, string, *nodev1.ExecutionReport) (bool, bool, error) {
	return false, false, nil
}

func (noExecutions) ReleaseNode(*store.Tx, string, []*store.CommandRow, *ctrlv1.WorkspaceFailure) (Released, error) {
	return Released{}, errors.New("fleet: no execution domain to release the node's executions")
}

// PlacementTimeout is how long a placement waits for a node to take it.
func (f *Fleet) PlacementTimeout() time.Duration { return f.cfg.PlacementTimeout }

// refresh is the longest a live session's registration goes unwritten
// while nothing placement reads changes. On an exclusive database nothing
// judges liveness by the write (LiveAt), so unless configured it is
// rarer: only the stored observation's own fields (its observed_at, the
// guests' reports' observed_at) age between writes.
func (f *Fleet) refresh() time.Duration {
	if f.exclusive && f.cfg.RegistrationRefresh == 0 {
		return exclusiveRefresh
	}
	return f.cfg.refresh()
}

// refreshOf is how long after its last write an observation of s writes
// its registration while nothing changed (refreshAfter of its interval).
func (f *Fleet) refreshOf(s *session) time.Duration { return f.refreshAfter(s.currentInterval()) }

// refreshAfter is refreshOf a session whose node reports every interval:
// refresh, less the interval, so that the write lands within refresh
// whatever the interval; and at least the interval.
func (f *Fleet) refreshAfter(interval time.Duration) time.Duration {
	return max(f.refresh()-interval, interval)
}

// lease is how long after a write of its registration a session whose
// node reports every interval stays live to the other replicas (the
// record's live_until). The next write comes with the first observation
// after refreshAfter, an interval later; a node that falls silent instead
// has its session ended, and written lost, within the silence limit. With
// the default timings that is 75 s (a minute's refresh and three 5-s
// intervals), the window every replica allowed before leases; a replica
// that spreads its nodes' reports over many sessions lengthens it with
// their interval, where a window of its own configuration let another
// replica judge its live sessions lost between writes.
func (f *Fleet) lease(interval time.Duration) time.Duration {
	return f.refreshAfter(interval) + interval + silenceLimitFor(interval)
}

// exclusiveRefresh is refresh on an exclusive database, unless configured.
const exclusiveRefresh = 15 * time.Minute

// silenceLimit is how long a session may go without a message from its
// node: three observation intervals, and at least minSilenceLimit. A node
// that exits closes its connection and is seen gone at once; the limit is
// for a host that vanished, and ending a session costs the node a new one
// (a new data token, SYNCING again), so a busy host or a pause of the
// collector must not end it.
func (c Config) silenceLimit() time.Duration { return silenceLimitFor(c.ObservationInterval) }

// silenceLimitFor is the silence limit of a session whose node reports
// every interval.
func silenceLimitFor(interval time.Duration) time.Duration {
	return max(3*interval, minSilenceLimit)
}

// spread is the factor (1 or more) by which the nodes of held sessions
// are asked to report and are probed less often than the Config says, so
// that their observations stay within MaxObservationRate.
func (c Config) spread(held int) float64 {
	return max(1, float64(held)/(c.MaxObservationRate*c.ObservationInterval.Seconds()))
}

// observationInterval is the interval asked of each node while held
// sessions are held.
func (c Config) observationInterval(held int) time.Duration {
	return time.Duration(float64(c.ObservationInterval) * c.spread(held))
}

// clockProbeInterval is how often each node's clock is probed while held
// sessions are held.
func (c Config) clockProbeInterval(held int) time.Duration {
	return time.Duration(float64(c.ClockProbeInterval) * c.spread(held))
}

// minSilenceLimit is the least silence that ends a session.
const minSilenceLimit = 10 * time.Second

// refresh is the longest a live session's registration goes unwritten
// while nothing placement reads changes.
func (c Config) refresh() time.Duration {
	if c.RegistrationRefresh > 0 {
		return c.RegistrationRefresh
	}
	return 12 * c.ObservationInterval
}

// LiveAt is Fleet.LiveAt for a reader built before the fleet (the
// catalog): now. Every session recorded live carries its holder's lease,
// whatever the database, so judging by it needs no more.
func (c Config) LiveAt(now time.Time) time.Time { return now }

// LiveAt is when a session must be live to take part at now, as the
// store's queries take it (store.CandidateQuery.LiveAt): now. On an
// exclusive database it is the zero time: every session recorded live is
// (this process holds them all).
func (f *Fleet) LiveAt(now time.Time) time.Time {
	if f.exclusive {
		return time.Time{}
	}
	return now
}

// Live reports whether n's control session is live at now. A session this
// replica holds is live (it ends one that goes silent); another's is live
// when the record says so and its holder's lease has not passed
// (store.LiveUntil): a ctrl that crashed cannot mark its sessions lost.
func (f *Fleet) Live(n *operatorv1.NodeRegistration, now time.Time) bool {
	if f.held(n) != nil {
		return true
	}
	return n.GetSession().GetLive() && !store.LiveUntil(n.GetSession()).Before(f.LiveAt(now))
}

// unobserved reports whether node id has been without a live control
// session for its UnobservedAfter, and when not, since when it has been
// without one (zero while its session is live): from then on it is lost.
// A session this replica holds is live, without a read; another's is as
// read reads the registration (Live). A node never registered has none.
func (f *Fleet) unobserved(id string, read func() (*operatorv1.NodeRegistration, error)) (lost bool, lostFrom time.Time, err error) {
	if f.holds(id) {
		return false, time.Time{}, nil
	}
	n, err := read()
	if errors.Is(err, store.ErrNotFound) {
		return true, time.Time{}, nil
	} else if err != nil {
		return false, time.Time{}, err
	}
	now := f.now()
	if f.Live(n, now) {
		return false, time.Time{}, nil
	}
	// Recorded lost at disconnected_at; recorded live by a replica that
	// stopped writing, from when its lease passed.
	since := n.GetSession().GetDisconnectedAt().AsTime()
	if s := n.GetSession(); s.GetLive() || s.GetDisconnectedAt() == nil {
		since = store.LiveUntil(s)
	}
	from := since.Add(f.cfg.UnobservedAfter)
	if !now.Before(from) {
		return true, time.Time{}, nil
	}
	return false, from, nil
}

// ObservedState is the state the Workspace API reports for a Workspace
// recorded in state whose execution runs on nodeID: an AVAILABLE one whose
// node has been without a live control session for UnobservedAfter
// (unobserved) reads UNKNOWN. ctrl cannot observe that execution, which
// may have ended with its host or run on unseen. A shorter loss (ctrl
// restarting, a connection cut and made again) leaves it as it is. The
// record is left as it is too: it reads AVAILABLE again once the node's
// session is back, or FAILED once an operator isolates the node. The
// states of a command under way (CREATING, STARTING, STOPPING, DELETING)
// are left as they are: the command says what it waits for. unknownAt is
// when an AVAILABLE one turns UNKNOWN with no write unless the session
// comes back (zero for none). A registration read cannot read leaves the
// recorded state.
func (f *Fleet) ObservedState(state ctrlv1.WorkspaceState, nodeID string, read func() (*operatorv1.NodeRegistration, error)) (observed ctrlv1.WorkspaceState, unknownAt time.Time) {
	if state != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || nodeID == "" {
		return state, time.Time{}
	}
	lost, from, err := f.unobserved(nodeID, read)
	switch {
	case err != nil:
		return state, time.Time{}
	case lost:
		return ctrlv1.WorkspaceState_WORKSPACE_STATE_UNKNOWN, time.Time{}
	}
	return state, from
}

// lifecycle is what a registration's view is derived from beside the
// record: which nodes drain, the Allocations charged to each (how many,
// and their sum), and the cluster-wide overcommit defaults.
type lifecycle struct {
	draining   map[string]bool
	executions map[string]int
	allocated  map[string]store.Resources
	defaults   *operatorv1.OvercommitDefaults
}

// readLifecycle reads the lifecycle of the nodes ids (every node when
// none is given).
func readLifecycle(tx *store.Tx, ids ...string) (lifecycle, error) {
	draining, err := tx.DrainingNodes()
	if err != nil {
		return lifecycle{}, err
	}
	allocated, err := tx.NodeAllocations(ids...)
	if err != nil {
		return lifecycle{}, err
	}
	executions := map[string]int{}
	for id, a := range allocated {
		executions[id] = a.Count
	}
	defaults, _, err := readDefaults(tx)
	return lifecycle{draining: draining, executions: executions, allocated: allocated, defaults: defaults}, err
}

// fillHeld sets each of n's attachments' held_object_count: the Volumes
// and writable layers, not deleted, whose use right n holds because an
// execution of theirs runs there.
func fillHeld(tx *store.Tx, n *operatorv1.NodeRegistration, lc lifecycle) error {
	if lc.executions[n.GetNodeId()] == 0 {
		return nil
	}
	runtimes, err := tx.NodeExecutions(n.GetNodeId())
	if err != nil {
		return err
	}
	held := map[string]uint64{}
	for _, rt := range runtimes {
		if rt.GetLayerPool() != "" {
			held[rt.GetLayerPool()]++
		}
		w, err := tx.GetWorkspace(rt.GetWorkspaceId(), false)
		if errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
			v, err := tx.GetVolume(b.GetVolumeId(), false)
			if err != nil {
				return err
			}
			if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_ATTACHED {
				held[v.GetSpec().GetStoragePool()]++
			}
		}
	}
	for _, a := range n.GetStoragePools() {
		a.HeldObjectCount = held[a.GetStoragePool()]
	}
	return nil
}

// view is a registration as the operator API shows it at now: status and
// the session-bound fields follow liveness.
func (f *Fleet) view(n *operatorv1.NodeRegistration, now time.Time, lc lifecycle) *operatorv1.NodeRegistration {
	f.overlay(n)
	live := f.Live(n, now)
	if !live {
		if n.Session != nil {
			n.Session.Live = false
			n.Session.Clock = nil
			n.Session.LiveUntil = nil
		}
		n.HostUsage = nil
		n.MemoryTight = nil
	}
	n.Status = status(n, live, lc.draining[n.GetNodeId()], lc.executions[n.GetNodeId()])
	fillResources(n, lc.defaults, lc.allocated[n.GetNodeId()])
	return n
}

// status is the first that applies of RETIRED, REVOKED, DRAINING or
// DRAINED (by the executions still charged to the node), UNAVAILABLE
// (no live session), READY (reconciled) and SYNCING.
func status(n *operatorv1.NodeRegistration, live, draining bool, executions int) operatorv1.NodeRegistrationStatus {
	switch {
	case n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED
	case n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_REVOKED
	case draining && executions > 0:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINING
	case draining:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED
	case !live:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE
	case n.GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY:
		return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY
	}
	return operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_SYNCING
}

// NodeForPool picks a node that can act on pool now: admitted, not
// isolated, with a live session, declaring the pool available, and able to
// handle block files. It returns "" when there is none. A draining node
// takes no new executions but still serves its pools: it is picked when no
// other node reaches the pool.
func (f *Fleet) NodeForPool(tx *store.Tx, pool string) (string, error) {
	return f.NodeForPools(tx, pool)
}

// NodeForPools is NodeForPool for a node reaching every one of pools (a
// copy between two pools, say).
func (f *Fleet) NodeForPools(tx *store.Tx, pools ...string) (string, error) {
	id, err := f.pickForPool(tx, pools, false)
	if id == "" && err == nil {
		id, err = f.pickForPool(tx, pools, true)
	}
	return id, err
}

// pickForPool is the first node by node_id that can do pool work on all
// of pools now; only draining ones when draining is set.
func (f *Fleet) pickForPool(tx *store.Tx, pools []string, draining bool) (string, error) {
	q := store.CandidateQuery{Limit: candidateBatch, Draining: draining, LiveAt: f.LiveAt(f.now()), Pools: pools}
	for {
		batch, err := tx.PlacementCandidates(q)
		if err != nil {
			return "", err
		}
		for _, row := range batch {
			if row.Has(capability.BlockFile) && reachesAll(row, pools) {
				return row.NodeID, nil
			}
		}
		if len(batch) < q.Limit {
			return "", nil
		}
		q.After = batch[len(batch)-1].NodeID
	}
}

func reachesAll(row *store.NodePlacement, pools []string) bool {
	for _, p := range pools {
		if !row.Reaches(p) {
			return false
		}
	}
	return true
}

// RunsVMs reports whether a node advertises one of the VM providers'
// capabilities (capability.Providers): a node runs Workspaces only then.
func RunsVMs(row *store.NodePlacement) bool {
	return slices.ContainsFunc(capability.Providers, row.Has)
}

// DefaultPool is the deployment's default storage pool: the one an admitted
// node names as its default (the first such node by node_id), or "".
func (f *Fleet) DefaultPool(tx *store.Tx) (string, error) {
	var pool string
	err := firstNode(tx, func(n *operatorv1.NodeRegistration) bool {
		for _, a := range n.GetStoragePools() {
			if a.GetDefaultPool() {
				pool = a.GetStoragePool()
				return true
			}
		}
		return false
	})
	return pool, err
}

// firstNodePage is how many registrations firstNode reads at a time.
const firstNodePage = 32

// firstNode reads admitted nodes' registrations by node_id, a page at a
// time, until found says one is what the caller looks for. Every new
// Volume without a pool (a create's default binding) asks for the default
// pool: reading every registration for it cost 4 ms of ctrl's CPU a
// create at 1,000 nodes, half of it (issue 15).
func firstNode(tx *store.Tx, found func(n *operatorv1.NodeRegistration) bool) error {
	after := ""
	for {
		page, err := tx.ListNodes(after, firstNodePage)
		if err != nil {
			return err
		}
		for _, n := range page {
			if n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED && found(n) {
				return nil
			}
		}
		if len(page) < firstNodePage {
			return nil
		}
		after = page[len(page)-1].GetNodeId()
	}
}

// NodeDefaultPool is the pool nodeID names as its own default, or "" when
// the node is not admitted or names none.
func (f *Fleet) NodeDefaultPool(tx *store.Tx, nodeID string) (string, error) {
	n, err := tx.GetNode(nodeID, false)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	} else if err != nil || n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED {
		return "", err
	}
	for _, a := range n.GetStoragePools() {
		if a.GetDefaultPool() {
			return a.GetStoragePool(), nil
		}
	}
	return "", nil
}

// PoolDeclared reports whether an admitted node has declared pool.
func (f *Fleet) PoolDeclared(tx *store.Tx, pool string) (bool, error) {
	declared := false
	err := firstNode(tx, func(n *operatorv1.NodeRegistration) bool {
		declared = slices.ContainsFunc(n.GetStoragePools(), func(a *operatorv1.StoragePoolAttachment) bool { return a.GetStoragePool() == pool })
		return declared
	})
	return declared, err
}
