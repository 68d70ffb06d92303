package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/version"
)

const (
	backoffMin = 200 * time.Millisecond
	backoffMax = 5 * time.Second
	// defaultObservationInterval applies when welcome names none.
	defaultObservationInterval = 15 * time.Second
	minObservationInterval     = 10 * time.Millisecond
	// welcomeTimeout bounds the wait for ctrl's answer to the hello.
	welcomeTimeout = 30 * time.Second
)

// backoff doubles from backoffMin to backoffMax; each wait is drawn from
// [d/2, d] so a fleet that lost ctrl does not come back in lockstep.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) reset() { b.d = 0 }

func (b *backoff) next() time.Duration {
	if b.d == 0 {
		b.d = backoffMin
	} else {
		b.d = min(2*b.d, backoffMax)
	}
	return b.d/2 + rand.N(b.d/2+1)
}

// session is one control session stream. send is safe for concurrent use
// and fails once the request side is closed.
type session struct {
	cancel context.CancelFunc
	stream *connect.BidiStreamForClient[nodev1.SessionRequest, nodev1.SessionResponse]

	mu        sync.Mutex
	reqClosed bool
}

var errSessionClosed = errors.New("session closed")

func (s *session) send(req *nodev1.SessionRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqClosed {
		return errSessionClosed
	}
	if err := s.stream.Send(req); err != nil {
		// The stream is broken; ending the session context also ends the
		// Receive that reports why.
		s.cancel()
		return err
	}
	return nil
}

// closeRequest ends the request side. The HTTP/2 transport notices a
// canceled context only once the request body is done, so ending the
// session context alone would leave Receive blocked: the session closes its
// request side when its context ends.
func (s *session) closeRequest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.reqClosed {
		s.reqClosed = true
		s.stream.CloseRequest()
	}
}

// session runs one control session until it fails or ctx ends. welcomed
// reports whether ctrl accepted the hello.
func (a *agent) session(ctx context.Context) (welcomed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	stream := a.client.Session(sctx)
	a.authHeader(stream.RequestHeader())
	s := &session{cancel: cancel, stream: stream}
	context.AfterFunc(sctx, s.closeRequest)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		s.closeRequest()
		stream.CloseResponse()
	}()

	if err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: a.hello()}}); err != nil {
		return false, receiveError(stream, err)
	}
	// A ctrl that takes the stream but never answers is given up on.
	welcomeTimer := time.AfterFunc(welcomeTimeout, cancel)
	first, err := stream.Receive()
	if !welcomeTimer.Stop() {
		return false, fmt.Errorf("no welcome from ctrl within %v", welcomeTimeout)
	}
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("ctrl answered the hello with %T, not welcome", first.GetMessage())
	}
	interval := defaultObservationInterval
	if d := welcome.GetObservationInterval(); d != nil && d.AsDuration() > 0 {
		interval = max(d.AsDuration(), minObservationInterval)
	}
	if tok := welcome.GetDataToken(); tok != "" {
		a.dataToken.Store(&tok)
	} else {
		a.log.Warn("the welcome carries no data token: the data endpoint refuses every call")
		a.dataToken.Store(nil)
	}
	a.log.Info("session established", "observation_interval", interval)

	schedule := make(chan time.Duration, 1)
	// probes hands the observer the clock probes whose replies carry an
	// observation; nil (never ready) when ctrl does not take them.
	var probes chan uint64
	if welcome.GetObservationInClockReply() {
		probes = make(chan uint64, 1)
	}
	wg.Go(func() { a.observe(sctx, s, interval, schedule, probes) })
	a.current.Store(s)
	defer a.current.CompareAndSwap(s, nil)

	for {
		msg, err := stream.Receive()
		if err != nil {
			return true, err
		}
		switch m := msg.GetMessage().(type) {
		case *nodev1.SessionResponse_ClockProbe:
			select {
			case probes <- m.ClockProbe.GetProbeId(): // answered with an observation
			default:
				// Alone: ctrl takes no observation in it, or the observer
				// has one probe to answer already.
				reply := a.clockReply(m.ClockProbe.GetProbeId())
				if err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: reply}}); err != nil {
					a.log.Debug("clock reply not sent", "err", err)
				}
			}
		case *nodev1.SessionResponse_Command:
			cmd := m.Command
			a.lanes.enqueue(cmd, func(res *nodev1.CommandResult) {
				err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_CommandResult{CommandResult: res}})
				if err != nil {
					a.log.WarnContext(operationLog(ctx, cmd), "command result not sent; ctrl will send the command again", "err", err)
				}
			})
		case *nodev1.SessionResponse_Schedule:
			if d := m.Schedule.GetObservationInterval().AsDuration(); d > 0 {
				a.log.Info("observation interval changed", "observation_interval", d)
				reschedule(schedule, max(d, minObservationInterval))
			}
		case *nodev1.SessionResponse_Welcome:
			a.log.Debug("ignoring a second welcome")
		default:
			a.log.Warn("ignoring an unknown message from ctrl", "type", fmt.Sprintf("%T", m))
		}
	}
}

// receiveError turns a failed first Send into the error ctrl ended the
// stream with, when it did.
func receiveError(stream *connect.BidiStreamForClient[nodev1.SessionRequest, nodev1.SessionResponse], sendErr error) error {
	if _, err := stream.Receive(); err != nil {
		return err
	}
	return sendErr
}

// reschedule hands the observer a new interval, replacing one it has not
// taken yet.
func reschedule(schedule chan time.Duration, d time.Duration) {
	for {
		select {
		case schedule <- d:
			return
		default:
		}
		select {
		case <-schedule:
		default:
		}
	}
}

// observe sends an observation now, then every interval (until schedule
// changes it) and at once when an execution changed. A probe from probes
// is answered at once with the observation in its reply, and the next one
// comes an interval after it.
func (a *agent) observe(ctx context.Context, s *session, interval time.Duration, schedule <-chan time.Duration, probes <-chan uint64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var probe *uint64
	for {
		obs, ended := a.observation()
		msg := &nodev1.SessionRequest{Message: &nodev1.SessionRequest_Observation{Observation: obs}}
		if probe != nil {
			reply := a.clockReply(*probe)
			reply.Observation = obs
			msg = &nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: reply}}
			probe = nil
		}
		if err := s.send(msg); err != nil {
			return
		}
		a.vms.reported(ended)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				break wait
			case <-a.vms.changed:
				break wait // an execution changed: report it now
			case id := <-probes:
				probe = &id
				t.Reset(interval)
				break wait
			case interval = <-schedule:
				t.Reset(interval) // the next observation an interval from now
			}
		}
	}
}

// clockReply answers probe id with the node's clock.
func (a *agent) clockReply(id uint64) *nodev1.ClockReply {
	return &nodev1.ClockReply{
		ProbeId: id, NodeTime: timestamppb.New(a.cfg.Now()),
		Synchronization: clockSynchronization(hostinfo.ClockState()),
	}
}

func clockSynchronization(c hostinfo.ClockSync) nodev1.ClockSynchronization {
	switch c {
	case hostinfo.ClockSynchronized:
		return nodev1.ClockSynchronization_CLOCK_SYNCHRONIZATION_SYNCHRONIZED
	case hostinfo.ClockUnsynchronized:
		return nodev1.ClockSynchronization_CLOCK_SYNCHRONIZATION_UNSYNCHRONIZED
	}
	return nodev1.ClockSynchronization_CLOCK_SYNCHRONIZATION_UNSPECIFIED
}

func (a *agent) capabilities() []string {
	var caps []string
	if a.blocks != nil && len(a.pools) > 0 {
		caps = append(caps, capability.BlockFile)
	}
	return append(caps, a.vms.capabilities()...)
}

func (a *agent) hello() *nodev1.NodeHello {
	res := &nodev1.HostResources{
		CpuMillis: uint32(min(hostinfo.CPUs()*1000, math.MaxUint32)),
	}
	if m, err := hostinfo.ReadMeminfo(); err == nil {
		res.MemoryBytes = m.TotalBytes
	} else {
		a.log.Warn("cannot read /proc/meminfo", "err", err)
	}
	if sp, err := hostinfo.Statfs(a.cfg.StateDir); err == nil {
		res.DiskBytes = sp.FreeBytes
	} else {
		a.log.Warn("cannot read the state directory's filesystem", "err", err)
	}
	return &nodev1.NodeHello{
		NodeId:       a.cfg.NodeID,
		Incarnation:  a.incarnation,
		Resources:    res,
		StoragePools: a.poolDeclarations(),
		Capabilities: a.capabilities(),
		AgentVersion: version.String(),
		BootId:       a.bootID,
		InstanceIds:  a.vms.instanceIDs(),
		DataEndpoint: a.data.url,
	}
}

func (a *agent) poolDeclarations() []*nodev1.StoragePoolDeclaration {
	decls := make([]*nodev1.StoragePoolDeclaration, 0, len(a.cfg.Pools))
	for _, p := range a.cfg.Pools {
		d := &nodev1.StoragePoolDeclaration{
			StoragePool: p.Name,
			DefaultPool: p.Default,
			Available:   hostinfo.Writable(p.Dir),
		}
		if sp, err := hostinfo.Statfs(p.Dir); err == nil {
			d.FilesystemSizeBytes = &sp.SizeBytes
			d.FilesystemFreeBytes = &sp.FreeBytes
		}
		decls = append(decls, d)
	}
	return decls
}

// observation is the node's report; ended are the ended executions it
// carries, reported once it is sent.
func (a *agent) observation() (obs *nodev1.NodeObservation, ended []string) {
	obs = &nodev1.NodeObservation{StoragePools: a.poolDeclarations()}
	obs.InstanceIds = a.vms.instanceIDs()
	obs.Executions, ended = a.vms.reports()
	a.judgeVolumes(obs.Executions)
	a.host.fill(obs, a.vms.samplers())
	obs.Artifacts = a.cachedArtifacts()
	return obs, ended
}

// cachedArtifacts is what the artifact cache holds, for ctrl's record of
// which Template images this node can use (GetTemplateDelivery).
func (a *agent) cachedArtifacts() []*nodev1.CachedArtifact {
	held, err := a.artifacts.Holdings()
	if err != nil {
		a.log.Warn("cannot list the artifact cache", "err", err)
		return nil
	}
	out := make([]*nodev1.CachedArtifact, 0, len(held))
	for _, h := range held {
		out = append(out, &nodev1.CachedArtifact{Digest: h.Digest, Complete: h.Complete, DeliveredBytes: h.Delivered, TotalBytes: h.Total})
	}
	return out
}

// sendProgress reports a start's progress on the current session, if any:
// progress is best effort.
func (a *agent) sendProgress(p *nodev1.ExecutionProgress) {
	s := a.current.Load()
	if s == nil {
		return
	}
	if err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_ExecutionProgress{ExecutionProgress: p}}); err != nil {
		a.log.Debug("progress not sent", "instance_id", p.GetInstanceId(), "err", err)
	}
}

// sendCopyProgress reports a copy's progress on the current session, if
// any: progress is best effort.
func (a *agent) sendCopyProgress(p *nodev1.CopyProgress) {
	s := a.current.Load()
	if s == nil {
		return
	}
	if err := s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_CopyProgress{CopyProgress: p}}); err != nil {
		a.log.Debug("copy progress not sent", "operation_id", p.GetOperationId(), "err", err)
	}
}
