package fleet

import (
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// Liveness lives in memory, not in the database (issue 15). A node reports
// every few seconds; writing each report would rewrite every node's
// registration that often, which at 10,000 nodes held SQLite's one
// connection most of the time with nothing changed. So the replica holding
// a session:
//
//   - ends it when the node is silent for three observation intervals
//     (watchSilence), and writes it lost then (detach), as Nomad's
//     heartbeat timers do;
//   - writes an observation only when something placement or the API's
//     records read changed (observationDue), and at least once every
//     refresh otherwise, each write with a lease (the session's
//     live_until, Fleet.lease) that covers the next, so that every replica
//     sees the session's replica alive (on SQLite, where there is no other
//     replica, the refresh is rare: Fleet.refresh);
//   - serves the newest sample (host_usage, memory_tight, last_seen_at,
//     clock) from memory to what it reads of the node (overlay).

// observed is what a session last wrote of its node's observations, to
// tell what changed since, and its newest sample, served from memory.
type observed struct {
	heardAt time.Time // the node's last message
	usage   *operatorv1.NodeHostUsage
	tight   *operatorv1.NodeMemoryTight
	// running are the newest reports of the executions running on the
	// node, by instance id: never written as such (the metrics read
	// them).
	running map[string]*nodev1.ExecutionReport
	// summary is the newest observation summary this session handled,
	// served in place of the one written last (overlay); version is the
	// last observation_version the session handed out. A version names
	// one snapshot: an observation written takes its version before its
	// write and is shown after it unless a newer one was by then.
	summary *operatorv1.NodeObservationSummary
	version uint64
	// helloVersion is the version the hello wrote: a registration whose
	// observation is newer was observed in this session.
	helloVersion uint64

	wroteAt time.Time // zero: no observation written in this session
	// leaseShort: the node was asked to report less often since the
	// registration was last written, so its lease (live_until) may pass
	// before the next write that refresh alone would make.
	leaseShort bool
	pools      []*nodev1.StoragePoolDeclaration
	tightSince *timestamppb.Timestamp
	// reports are the running executions' reports as last applied
	// (instance id → report), and reportsAt when all of them last were.
	reports   map[string]*nodev1.ExecutionReport
	reportsAt time.Time
	// noted are the reports of reports a start's answer noted
	// (noteStartReport) that no observation written since listed: an
	// observation the node took before it answered, written after, does
	// not list the execution yet, and must not drop its report.
	noted map[string]bool
}

// heard notes a message from the node.
func (s *session) heard(now time.Time) {
	s.mu.Lock()
	s.obs.heardAt = now
	s.mu.Unlock()
}

// watchSilence ends the session when its node says nothing for the
// silence limit: its host died or its network went, without the
// connection closing. It is a timer, not a goroutine: it fires when the
// limit could first have passed since the last message heard, looks, and
// is set again for when it next could. With 10,000 sessions a ticker and
// a goroutine each woke ctrl 2,000 times a second (docs/PERFORMANCE.md,
// the idle fleet). stop stops it; the session's end stops it too.
func (f *Fleet) watchSilence(ctx context.Context, s *session) (stop func()) {
	var t *time.Timer
	// t is set and read under s.mu: the timer's function runs in a
	// goroutine of its own.
	s.mu.Lock()
	defer s.mu.Unlock()
	t = time.AfterFunc(silenceLimitFor(s.interval), func() {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		limit := silenceLimitFor(s.interval)
		silent := f.now().Sub(s.obs.heardAt)
		if silent <= limit {
			t.Reset(limit - silent + silenceSlack)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		f.log.WarnContext(ctx, "node session silent; ending it", "node_id", s.nodeID, "silent", silent.Round(time.Millisecond))
		s.end(connect.NewError(connect.CodeDeadlineExceeded, errors.New("no message from the node within three of its observation intervals")))
	})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		t.Stop()
	}
}

// silenceSlack is how long after the limit could first have passed the
// silence timer looks again, so that a look never comes just before it.
const silenceSlack = 10 * time.Millisecond

// sample keeps o's usage sample as the newest, received at now.
func (s *session) sample(o *nodev1.NodeObservation, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obs.usage = hostUsage(o, now)
	s.obs.tight = memoryTight(o)
	running := make(map[string]*nodev1.ExecutionReport, len(o.GetExecutions()))
	for _, r := range o.GetExecutions() {
		if r.GetRunning() {
			running[r.GetInstanceId()] = r
		}
	}
	s.obs.running = running
}

// observationDue reports whether o must be written now, and which of its
// running executions' reports: those that changed since applied (or never
// were: a stray, a start whose answer no step waits for in memory), or
// all of them at a refresh. A report of a start whose answer a step waits
// for (awaited) is not: the answer carries it (noteStartReport). lazy says
// that only the refresh is due: nothing changed that anyone reads, so the
// write may wait for others to share its transaction (touchLazily).
func (s *session) observationDue(o *nodev1.NodeObservation, now time.Time, refresh time.Duration, awaited map[string]bool) (due bool, reports []*nodev1.ExecutionReport, all, lazy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.obs
	all = w.reportsAt.IsZero() || now.Sub(w.reportsAt) >= refresh
	changed := false
	for _, r := range o.GetExecutions() {
		if !r.GetRunning() || awaited[r.GetInstanceId()] {
			continue
		}
		differs := !proto.Equal(stable(r), w.reports[r.GetInstanceId()])
		if all || differs {
			reports = append(reports, r)
		}
		changed = changed || differs
	}
	// How many executions run is served from memory (summary) and written
	// with the next observation that is due: a start changes it, and
	// writing it then cost a registration write a placement.
	urgent := w.wroteAt.IsZero() || changed || w.leaseShort ||
		!proto.Equal(o.GetMemoryTightSince(), w.tightSince) ||
		(len(o.GetStoragePools()) > 0 && !slices.EqualFunc(o.GetStoragePools(), w.pools, func(a, b *nodev1.StoragePoolDeclaration) bool { return proto.Equal(a, b) }))
	due = urgent || now.Sub(w.wroteAt) >= refresh || len(reports) > 0
	return due, reports, all, due && !urgent
}

// unwritten reports whether o holds anything to write: what the node's
// cache holds changed, or the registration is due (observationDue).
func (s *session) unwritten(o *nodev1.NodeObservation, now time.Time, refresh time.Duration, awaited map[string]bool) bool {
	if s.artifactsChanged(o.GetArtifacts()) {
		return true
	}
	due, _, _, _ := s.observationDue(o, now, refresh, awaited)
	return due
}

// artifactsChanged reports whether held differs from what the session
// last wrote of the node's cache (or it wrote none yet).
func (s *session) artifactsChanged(held []*nodev1.CachedArtifact) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.artifactsWritten || !slices.EqualFunc(s.artifacts, held, func(a, b *nodev1.CachedArtifact) bool { return proto.Equal(a, b) })
}

// wrote notes that o was written at now, with the reports applied (all:
// every running execution's report was handed in).
func (s *session) wrote(o *nodev1.NodeObservation, applied []*nodev1.ExecutionReport, all bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.obs
	w.wroteAt, w.tightSince, w.leaseShort = now, o.GetMemoryTightSince(), false
	if len(o.GetStoragePools()) > 0 {
		w.pools = o.GetStoragePools()
	}
	if all {
		w.reportsAt = now
	}
	running := map[string]bool{}
	for _, r := range o.GetExecutions() {
		running[r.GetInstanceId()] = r.GetRunning()
	}
	for id := range w.reports {
		run, listed := running[id]
		switch {
		case run:
			delete(w.noted, id)
		case !listed && w.noted[id]: // noted after o was taken
		default:
			delete(w.reports, id)
			delete(w.noted, id)
		}
	}
	if w.reports == nil {
		w.reports = map[string]*nodev1.ExecutionReport{}
	}
	for _, r := range applied {
		w.reports[r.GetInstanceId()] = stable(r)
	}
}

// stable is r without what changes at every report and nothing in
// ctrl reads: the guest's memory stall average.
func stable(r *nodev1.ExecutionReport) *nodev1.ExecutionReport {
	if r.GetMemory().GetFullAvg10Permille() == 0 {
		return r
	}
	c := proto.Clone(r).(*nodev1.ExecutionReport)
	c.Memory.FullAvg10Permille = 0
	return c
}

// held is the session this replica holds for n's node, when it is the one
// n's record names; nil otherwise.
func (f *Fleet) held(n *operatorv1.NodeRegistration) *session {
	f.mu.Lock()
	s := f.sessions[n.GetNodeId()]
	f.mu.Unlock()
	if s == nil || !n.GetSession().GetLive() || !n.GetSession().GetConnectedAt().AsTime().Equal(s.connectedAt) {
		return nil
	}
	return s
}

// overlay puts the newest sample of the session this replica holds for n
// into n, in place of the one written last.
func (f *Fleet) overlay(n *operatorv1.NodeRegistration) {
	s := f.held(n)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.obs.heardAt.IsZero() {
		n.Session.LastSeenAt = timestamppb.New(s.obs.heardAt)
	}
	if s.obs.usage != nil {
		n.HostUsage, n.MemoryTight = s.obs.usage, s.obs.tight
	}
	if s.obs.summary != nil {
		n.Observation = proto.CloneOf(s.obs.summary)
	}
	if s.clock != nil {
		n.Session.Clock = s.clock
	}
}

// summarized starts the session's observation summaries from the one its
// hello wrote.
func (s *session) summarized(written *operatorv1.NodeObservationSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obs.summary, s.obs.version = written, written.GetObservationVersion()
	s.obs.helloVersion = s.obs.version
}

// nextSummary hands out the next observation_version, for o received at
// now: the summary of o to show, or to write and then show (shown).
func (s *session) nextSummary(o *nodev1.NodeObservation, now time.Time) *operatorv1.NodeObservationSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obs.version++
	return &operatorv1.NodeObservationSummary{
		ObservationVersion: s.obs.version, ObservedAt: timestamppb.New(now), Resources: s.obs.summary.GetResources(),
		Capabilities: s.obs.summary.GetCapabilities(), ExecutionCount: uint32(len(o.GetInstanceIds())),
	}
}

// summaryShown is the summary served from memory.
func (s *session) summaryShown() *operatorv1.NodeObservationSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obs.summary
}

// shown makes sum the summary served, unless a newer one is.
func (s *session) shown(sum *operatorv1.NodeObservationSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sum.GetObservationVersion() > s.obs.summary.GetObservationVersion() {
		s.obs.summary = sum
	}
}

// hostUsage is o's usage sample as received at now.
func hostUsage(o *nodev1.NodeObservation, now time.Time) *operatorv1.NodeHostUsage {
	return &operatorv1.NodeHostUsage{
		ObservedAt: timestamppb.New(now), VmCpuMillis: o.VmCpuMillis, VmMemoryBytes: o.VmMemoryBytes,
		MemoryAvailableBytes: o.MemoryAvailableBytes, CpuPressureSomeBasisPoints: o.CpuPressureSomeBasisPoints,
		MemoryPressureSomeBasisPoints: o.MemoryPressureSomeBasisPoints, MemoryPressureFullBasisPoints: o.MemoryPressureFullBasisPoints,
	}
}

// memoryTight is o's judgement of its host's memory, nil when not tight.
func memoryTight(o *nodev1.NodeObservation) *operatorv1.NodeMemoryTight {
	if o.GetMemoryTightSince() == nil {
		return nil
	}
	return &operatorv1.NodeMemoryTight{Since: o.GetMemoryTightSince(), ThresholdBytes: o.GetMemoryTightThresholdBytes()}
}

// noteStartReport notes the report r, a node's answer to a start, carries
// (nodev1.ExecutionStatus.report) as applied: the start's end records it
// as the execution's first guest observation, so that the node's
// observations that say the same write nothing. Before it, the first
// observation after every start read the execution's runtime and read and
// wrote its Workspace again (issue 15). It is noted as the answer is
// heard, before the observation the node sends after it, and only for a
// step waiting in memory, which records the report or calls forget
// (Answer.ForgetReport): the next observation is then applied, or finds a
// stray. An answer that is no running start's notes nothing.
func (s *session) noteStartReport(r *nodev1.CommandResult) (forget func()) {
	status := &nodev1.ExecutionStatus{}
	if r.GetCode() != 0 || !r.GetResult().MessageIs(status) || r.GetResult().UnmarshalTo(status) != nil {
		return func() {}
	}
	rep := status.GetReport()
	if !status.GetRunning() || !rep.GetRunning() || rep.GetInstanceId() != status.GetInstanceId() {
		return func() {}
	}
	id, noted := rep.GetInstanceId(), stable(rep)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs.reports == nil {
		s.obs.reports = map[string]*nodev1.ExecutionReport{}
	}
	if s.obs.noted == nil {
		s.obs.noted = map[string]bool{}
	}
	prev, had := s.obs.reports[id]
	s.obs.reports[id], s.obs.noted[id] = noted, true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.obs.reports[id] != noted: // an observation applied since
		case had:
			s.obs.reports[id] = prev
			delete(s.obs.noted, id)
		default:
			delete(s.obs.reports, id)
			delete(s.obs.noted, id)
		}
	}
}
