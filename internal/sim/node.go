package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
)

const (
	backoffMin     = 200 * time.Millisecond
	backoffMax     = 10 * time.Second
	welcomeTimeout = 30 * time.Second
	// defaultObservationInterval applies when the welcome names none, as
	// in the node agent.
	defaultObservationInterval = 15 * time.Second
)

// simNode is one simulated node: its credential and what it "runs".
type simNode struct {
	f      *Fleet
	id     string
	client nodev1connect.NodeSessionServiceClient
	// credential is only touched by the node's own goroutine.
	credential string

	mu      sync.Mutex
	running map[string]*nodev1.StartExecution // instance id → its start
	ended   []string                          // stopped, not reported yet
	applied map[string]*nodev1.CommandResult  // operation id → its answer
	changed chan struct{}
}

func newNode(f *Fleet, id string, client nodev1connect.NodeSessionServiceClient) *simNode {
	return &simNode{
		f: f, id: id, client: client,
		running: map[string]*nodev1.StartExecution{}, applied: map[string]*nodev1.CommandResult{},
		changed: make(chan struct{}, 1),
	}
}

// run holds the node's session until ctx ends, enrolling first and
// reconnecting with jittered backoff, as the node agent does.
func (n *simNode) run(ctx context.Context) {
	delay := time.Duration(0)
	for {
		welcomed, err := n.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if welcomed {
			delay = 0
		}
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			n.credential = "" // ctrl forgot us (a new database): enroll again
		}
		delay = min(max(2*delay, backoffMin), backoffMax)
		wait := delay/2 + rand.N(delay/2+1)
		n.f.log.Debug("simulated node session ended; reconnecting", "node_id", n.id, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// enroll exchanges the fleet's grant for the node's credential.
func (n *simNode) enroll(ctx context.Context) error {
	res, err := n.client.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{
		GrantSecret: n.f.cfg.Grant, NodeId: n.id, Incarnation: n.f.incarnation,
	}))
	if err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	if res.Msg.GetCredential() == "" {
		return errors.New("enroll: ctrl answered no credential")
	}
	n.credential = res.Msg.GetCredential()
	return nil
}

// stream is one control session's stream; send is safe for concurrent use
// (observations and answers).
type stream struct {
	cancel context.CancelFunc
	bidi   *connect.BidiStreamForClient[nodev1.SessionRequest, nodev1.SessionResponse]

	mu     sync.Mutex
	closed bool
}

func (s *stream) send(req *nodev1.SessionRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("session closed")
	}
	if err := s.bidi.Send(req); err != nil {
		s.cancel()
		return err
	}
	return nil
}

// closeRequest ends the request side once the session's context ends: the
// HTTP/2 transport notices a canceled context only then, so Receive would
// stay blocked otherwise.
func (s *stream) closeRequest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		_ = s.bidi.CloseRequest()
	}
}

// session runs one control session until it fails or ctx ends. Enrolling
// and the hello take one of the fleet's start slots, so a fleet coming up
// reaches ctrl a bounded number of nodes at a time.
func (n *simNode) session(ctx context.Context) (welcomed bool, err error) {
	select {
	case n.f.startSlots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	slot := true
	release := func() {
		if slot {
			slot = false
			<-n.f.startSlots
		}
	}
	defer release()
	if n.credential == "" {
		if err := n.enroll(ctx); err != nil {
			return false, err
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &stream{cancel: cancel, bidi: n.client.Session(sctx)}
	s.bidi.RequestHeader().Set("Authorization", "Bearer "+n.credential)
	s.bidi.RequestHeader().Set(fleet.HeaderNodeID, n.id)
	context.AfterFunc(sctx, s.closeRequest)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		s.closeRequest()
		_ = s.bidi.CloseResponse()
	}()

	if err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: n.hello()}}); err != nil {
		return false, err
	}
	timer := time.AfterFunc(welcomeTimeout, cancel)
	first, err := s.bidi.Receive()
	if !timer.Stop() {
		return false, fmt.Errorf("no welcome from ctrl within %v", welcomeTimeout)
	}
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("ctrl answered the hello with %T, not welcome", first.GetMessage())
	}
	release()
	n.f.established.Add(1)
	defer n.f.established.Add(-1)
	interval := defaultObservationInterval
	if d := welcome.GetObservationInterval().AsDuration(); d > 0 {
		interval = d
	}
	schedule := make(chan time.Duration, 1)
	// probes hands the observer the clock probes it answers with an
	// observation in the reply, as the node agent does; nil when ctrl does
	// not take them.
	var probes chan uint64
	if welcome.GetObservationInClockReply() {
		probes = make(chan uint64, 1)
	}
	wg.Go(func() { n.observe(sctx, s, interval, schedule, probes) })
	for {
		msg, err := s.bidi.Receive()
		if err != nil {
			return true, err
		}
		switch m := msg.GetMessage().(type) {
		case *nodev1.SessionResponse_ClockProbe:
			select {
			case probes <- m.ClockProbe.GetProbeId():
			default:
				_ = s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: clockReply(m.ClockProbe.GetProbeId())}})
			}
		case *nodev1.SessionResponse_Schedule:
			if d := m.Schedule.GetObservationInterval().AsDuration(); d > 0 {
				select {
				case <-schedule: // not taken yet: replaced
				default:
				}
				schedule <- d // this goroutine alone sends
			}
		case *nodev1.SessionResponse_Command:
			n.reportDelivery(s, m.Command)
			// Simulated operations take no time: answer in order, at once.
			res := n.execute(m.Command)
			_ = s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_CommandResult{CommandResult: res}})
		}
	}
}

// observe sends an observation now (ctrl marks the node READY on the
// first), then every interval and at once when an execution changed. The
// first periodic one comes after a random part of the interval, so a fleet
// that connected in a burst does not report in lockstep. schedule changes
// the interval (ctrl's SessionSchedule): the next one comes within it. A
// probe from probes is answered at once with the observation in its reply,
// and the next one comes an interval after it.
func (n *simNode) observe(ctx context.Context, s *stream, interval time.Duration, schedule <-chan time.Duration, probes <-chan uint64) {
	t := time.NewTimer(rand.N(interval) + 1)
	defer t.Stop()
	var probe *uint64
	for {
		obs, ended := n.observation()
		msg := &nodev1.SessionRequest{Message: &nodev1.SessionRequest_Observation{Observation: obs}}
		if probe != nil {
			reply := clockReply(*probe)
			reply.Observation = obs
			msg = &nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: reply}}
			probe = nil
		}
		if err := s.send(msg); err != nil {
			return
		}
		n.reported(ended)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(interval)
				break wait
			case <-n.changed:
				break wait
			case id := <-probes:
				probe = &id
				t.Reset(interval) // since Go 1.23 no stale tick remains
				break wait
			case interval = <-schedule:
				// Spread within the new interval, as at the start.
				t.Reset(rand.N(interval) + 1)
			}
		}
	}
}

// clockReply answers probe id. The simulation's clock is this process's:
// it reports it as synchronized, so clock skew never keeps a node from
// placement.
func clockReply(id uint64) *nodev1.ClockReply {
	return &nodev1.ClockReply{
		ProbeId: id, NodeTime: timestamppb.Now(),
		Synchronization: nodev1.ClockSynchronization_CLOCK_SYNCHRONIZATION_SYNCHRONIZED,
	}
}

func (n *simNode) hello() *nodev1.NodeHello {
	return &nodev1.NodeHello{
		NodeId: n.id, Incarnation: n.f.incarnation, Resources: n.f.cfg.Resources,
		StoragePools: n.poolDeclarations(), Capabilities: capabilities(), AgentVersion: agentVersion(),
		BootId: n.f.bootID, InstanceIds: n.instanceIDs(),
		// No data endpoint: nothing runs, so there is nothing to reach.
	}
}

// poolDeclarations are the node's own pool and the shared one. A pool
// reports its whole size free: simulated block files are sparse files
// nothing writes to.
func (n *simNode) poolDeclarations() []*nodev1.StoragePoolDeclaration {
	size := n.f.cfg.PoolBytes
	own := &nodev1.StoragePoolDeclaration{
		StoragePool: n.id, DefaultPool: !n.f.cfg.SharedPoolDefault || n.f.cfg.SharedPool == "", Available: true,
		FilesystemSizeBytes: &size, FilesystemFreeBytes: &size,
	}
	decls := []*nodev1.StoragePoolDeclaration{own}
	if p := n.f.cfg.SharedPool; p != "" {
		decls = append(decls, &nodev1.StoragePoolDeclaration{
			StoragePool: p, DefaultPool: n.f.cfg.SharedPoolDefault, Available: true,
			FilesystemSizeBytes: &size, FilesystemFreeBytes: &size,
		})
	}
	return decls
}

// observation is the node's report: what it runs, what the simulated VMs
// use of the host, and the executions stopped since the last report.
func (n *simNode) observation() (*nodev1.NodeObservation, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var cpu uint32
	var mem uint64
	obs := &nodev1.NodeObservation{StoragePools: n.poolDeclarations()}
	for id, start := range n.running {
		cpu += start.GetVcpus() * 1000
		mem += start.GetMemoryBytes()
		obs.InstanceIds = append(obs.InstanceIds, id)
		obs.Executions = append(obs.Executions, n.runningReport(id))
	}
	for _, id := range n.ended {
		obs.Executions = append(obs.Executions, &nodev1.ExecutionReport{InstanceId: id, End: nodev1.ExecutionEnd_EXECUTION_END_STOPPED})
	}
	avail := n.f.cfg.Resources.GetMemoryBytes() - min(mem, n.f.cfg.Resources.GetMemoryBytes())
	var zero uint32
	obs.VmCpuMillis, obs.VmMemoryBytes, obs.MemoryAvailableBytes = &cpu, &mem, &avail
	obs.CpuPressureSomeBasisPoints, obs.MemoryPressureSomeBasisPoints, obs.MemoryPressureFullBasisPoints = &zero, &zero, &zero
	return obs, n.ended
}

// runningReport is a running simulated execution's report: its guest
// always answers, with the memory report Config.GuestMemory gives.
func (n *simNode) runningReport(id string) *nodev1.ExecutionReport {
	r := &nodev1.ExecutionReport{InstanceId: id, Running: true, Responding: true}
	if m := n.f.cfg.GuestMemory; m != nil {
		r.Memory = m(id)
	}
	return r
}

// reported forgets the stopped executions an observation carried.
func (n *simNode) reported(ended []string) {
	if len(ended) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ended = n.ended[len(ended):]
}

func (n *simNode) instanceIDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]string, 0, len(n.running))
	for id := range n.running {
		ids = append(ids, id)
	}
	return ids
}

// change tells the observer to report now.
func (n *simNode) change() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}
