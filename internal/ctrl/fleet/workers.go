package fleet

import (
	"context"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// A session's workers do its work besides reading the node's messages:
// the sender sends operations and clock probes, the writer writes
// observations. Each is a goroutine started when it has work and ended
// once it has none, at most one of each a session at a time, so that an
// idle session keeps no goroutine but its handler's. The sender and the
// writer are apart so that a placement's StartExecution never waits
// behind an observation's commit.

// openWorkers lets workers run in ctx, once the node was welcomed, and
// starts the sender: it sends the first clock probe and the node's
// pending operations, read from the database.
func (f *Fleet) openWorkers(ctx context.Context, s *session) {
	s.mu.Lock()
	s.workCtx = ctx
	s.probeTimer = time.AfterFunc(nextProbeIn(time.Now(), f.cfg.clockProbeInterval(f.sessionsHeld())), func() { f.probeDue(s) })
	s.mu.Unlock()
	f.wake(s, func(s *session) { s.reread, s.probeDue = true, true })
}

// closeWorkers starts no worker any more, ends those running (cancel ends
// the context they run in) and waits for them.
func (f *Fleet) closeWorkers(s *session, cancel context.CancelFunc) {
	s.mu.Lock()
	s.workCtx = nil
	s.probeTimer.Stop()
	s.mu.Unlock()
	cancel()
	s.workers.Wait()
}

// claim applies note (if any) to s and answers whether the caller is to
// run the worker whose flag running is: when none runs and the session is
// open for workers. The worker is then counted and calls s.workers.Done
// when it ends.
func (s *session) claim(note func(*session), running *bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if note != nil {
		note(s)
	}
	if s.workCtx == nil || *running {
		return false
	}
	*running = true
	s.workers.Add(1) // under mu, before closeWorkers can wait
	return true
}

// next answers the context the worker whose flag running is goes on in,
// having taken its work (take answers whether there was some), or nil
// when it is to end: the session closed, or there is no work. running is
// then cleared in the same hold of mu as the look, so that a claim
// between the two cannot be lost.
func (s *session) next(running *bool, take func(*session) bool) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := s.workCtx
	if ctx == nil || ctx.Err() != nil || !take(s) {
		*running = false
		return nil
	}
	return ctx
}

// quit clears running: its worker ends without looking for more work.
func (s *session) quit(running *bool) {
	s.mu.Lock()
	*running = false
	s.mu.Unlock()
}

// wakeSender applies note to nodeID's session, if this replica holds it,
// and wakes its sender.
func (f *Fleet) wakeSender(nodeID string, note func(*session)) {
	f.mu.Lock()
	s := f.sessions[nodeID]
	f.mu.Unlock()
	if s != nil {
		f.wake(s, note)
	}
}

// wake applies note to s and starts a sender if none runs.
func (f *Fleet) wake(s *session, note func(*session)) {
	if s.claim(note, &s.sending) {
		go f.sendOperations(s)
	}
}

// probeDue is the probe timer's: it asks for a clock probe, and is the
// sender itself when none runs rather than start one from the timer's
// goroutine.
func (f *Fleet) probeDue(s *session) {
	if s.claim(func(s *session) { s.probeDue = true }, &s.sending) {
		f.sendOperations(s)
	}
}

// sendOperations sends a clock probe when one is due, and the node's
// operations: those in the session's outbox, and its pending ones read
// from the database when asked (reread: at the start of the session, by
// this replica's Notify after it recorded an operation, and by
// PollOperations for those another replica recorded; one fleet-wide poll
// instead of one per session keeps ctrl's load flat in the number of idle
// sessions). It runs until it finds nothing more to send, or the session
// ends.
func (f *Fleet) sendOperations(s *session) {
	defer s.workers.Done()
	for {
		var pending []*storev1.NodeOperation
		var reread, probe bool
		ctx := s.next(&s.sending, func(s *session) bool {
			pending, reread, probe = s.outbox, s.reread, s.probeDue
			s.outbox, s.reread, s.probeDue = nil, false, false
			return len(pending) > 0 || reread || probe
		})
		if ctx == nil {
			return
		}
		if probe && !f.probe(s) {
			s.quit(&s.sending)
			return
		}
		if reread {
			err := f.store.Tx(ctx, func(tx *store.Tx) error {
				var err error
				pending, err = tx.PendingNodeOperations(s.nodeID, 100)
				return err
			})
			if err != nil && ctx.Err() == nil {
				f.log.WarnContext(ctx, "read pending node operations", "node_id", s.nodeID, "err", err)
			}
		}
		if !f.sendPending(s, pending) {
			s.quit(&s.sending)
			return
		}
	}
}

// sendPending sends those of pending not sent on this session yet, and
// answers whether the stream took them all.
func (f *Fleet) sendPending(s *session, pending []*storev1.NodeOperation) bool {
	for _, op := range pending {
		s.mu.Lock()
		already := s.sent[op.GetOperationId()]
		s.sent[op.GetOperationId()] = true
		s.mu.Unlock()
		if already {
			continue
		}
		if err := s.send(&nodev1.SessionResponse{Message: &nodev1.SessionResponse_Command{Command: &nodev1.NodeCommand{
			OperationId: op.GetOperationId(), CommandId: op.GetCommandId(), Body: op.GetBody(), Traceparent: op.GetTraceparent(), RequestId: op.GetRequestId(),
		}}}); err != nil {
			return false
		}
	}
	return true
}

// probe sends a clock probe; with it the node hears its new observation
// interval when that changed (reschedule). It arms the next after
// ClockProbeInterval, spread as the sessions held grow (Config.spread),
// and answers whether the stream took them: a probe that cannot be sent
// arms none (the session is ending). Its offset is measured around its
// own send, so time the sender spent before it does not skew it.
func (f *Fleet) probe(s *session) bool {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.probes[id] = f.now()
	s.mu.Unlock()
	if err := s.send(&nodev1.SessionResponse{Message: &nodev1.SessionResponse_ClockProbe{ClockProbe: &nodev1.ClockProbe{ProbeId: id}}}); err != nil {
		return false
	}
	if err := f.reschedule(s); err != nil {
		return false
	}
	every := f.cfg.clockProbeInterval(f.sessionsHeld())
	s.mu.Lock()
	if s.workCtx != nil {
		s.probeTimer.Reset(nextProbeIn(time.Now(), every))
	}
	s.mu.Unlock()
	return true
}

// nextProbeIn is how long from now until a session's next clock probe:
// every, put off to the next multiple of a grid of the wall clock (a
// tenth of every, at most maxProbeGrid). The probes of all the sessions a
// replica holds then go out together at a few instants a second, and so
// do the nodes' replies and, since a node reports its next observation an
// interval after a probe, their observations. A process that wakes for
// one message at a time pays the wake-up (the scheduler, futexes, epoll)
// for each: an idle 10,000-node fleet whose sessions began at different
// times, as a real fleet's do, cost ctrl 0.14-0.21 cores with probes at
// any instant and 0.08-0.12 with them on the grid, for the same messages
// (docs/PERFORMANCE.md, the idle fleet). The timer is a real one, so the
// grid is the real clock's, whatever clock the fleet reads.
func nextProbeIn(now time.Time, every time.Duration) time.Duration {
	grid := min(every/10, maxProbeGrid)
	if grid <= 0 {
		return every
	}
	at := now.Add(every)
	next := at.Truncate(grid)
	if next.Before(at) {
		next = next.Add(grid)
	}
	return next.Sub(now)
}

// maxProbeGrid bounds the grid probes are put on: a probe comes late by
// less than it.
const maxProbeGrid = 100 * time.Millisecond

// wakeWriter starts the session's observation writer if none runs.
func (f *Fleet) wakeWriter(s *session) {
	if s.claim(nil, &s.writing) {
		go f.writeObservations(s)
	}
}

// writeObservations writes the session's newest observation while one
// arrived since the last was written. A node no longer admitted ends the
// session.
func (f *Fleet) writeObservations(s *session) {
	defer s.workers.Done()
	for {
		var o *nodev1.NodeObservation
		ctx := s.next(&s.writing, func(s *session) bool {
			o, s.latest = s.latest, nil
			return o != nil
		})
		if ctx == nil {
			return
		}
		err := f.writeObservation(ctx, s, o)
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			s.end(err) // the next look ends the writer
		} else if err != nil {
			f.log.WarnContext(ctx, "node observation", "node_id", s.nodeID, "err", err)
		}
	}
}
