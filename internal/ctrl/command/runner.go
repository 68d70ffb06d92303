package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/store"
)

// Handler drives one step of a long command. It ends the step with exactly
// one of Work.Succeed, Work.Fail, Work.Wait or Work.Continue; an error
// instead retries the step after a back-off.
type Handler func(ctx context.Context, w *Work) error

// Runner drives the long commands of every kind it has a Handler for.
type Runner struct {
	store    *store.Store
	owner    string
	handlers map[string]Handler
	log      *slog.Logger
	now      func() time.Time
	lease    time.Duration
	poll     time.Duration
	workers  int
	// placeWait is the longest an admission waits for a free worker place.
	placeWait time.Duration
	kick      chan struct{}
	metrics   *metrics.Metrics
	// sem holds a place for each step running (workers places).
	sem chan struct{}
	// queue holds a place for each admission waiting for one of sem's
	// (admissionsAhead places; waitPlace).
	queue chan struct{}
	// heavy holds a place for each step doing heavy work in ctrl itself
	// (heavyWorkers places, Work.Heavy).
	heavy chan struct{}

	// mu guards running: Run's context while it runs, nil otherwise. A
	// step Do starts joins Run's steps (wg) only while Run runs.
	mu      sync.Mutex
	running context.Context
	wg      sync.WaitGroup
	// together queues the ends of steps applied together
	// (Work.SucceedTogether), admitting the admissions made together
	// (DoTogether).
	together  gatherer[*togetherEnd]
	admitting admitters
}

// NewRunner makes a Runner. owner names this ctrl replica in leases; it
// must be unique among replicas sharing a database.
func NewRunner(s *store.Store, owner string, log *slog.Logger, opts ...Option) *Runner {
	r := &Runner{
		store: s, owner: owner, handlers: map[string]Handler{}, log: log,
		now: time.Now, lease: failpoint.Lease(30 * time.Second), poll: time.Second, workers: DefaultWorkers, placeWait: DefaultPlaceWait,
		kick: make(chan struct{}, 1), heavy: make(chan struct{}, heavyWorkers), queue: make(chan struct{}, admissionsAhead),
	}
	for _, o := range opts {
		o(r)
	}
	r.sem = make(chan struct{}, r.workers)
	r.together.max = maxTogether
	r.admitting.max = maxAdmitTogether
	if s != nil && !s.Exclusive() { // nil: a runner that never runs (fuzzing the API's checks)
		r.admitting.turn = &sync.Mutex{}
	}
	return r
}

// DefaultWorkers is how many steps a runner runs at once unless
// WithWorkers says otherwise. A step waiting for a node's answer gives its
// place back (Work.Idle), but a step that writes waits for its turn on the
// database in its place: with eight places, creations queued for a place
// behind steps waiting for SQLite's one writer, and took either ~20 ms or
// ~200 ms (docs/PERFORMANCE.md, "The runner's workers"). Heavy work in ctrl
// itself (a template build, an export's assembly) keeps to its own, smaller
// bound (Work.Heavy). An admission holds a place from before its
// transaction until its step goes idle, and one that finds none free
// admits its command unclaimed, to be placed the long way (a claim and
// a step of their own, and on PostgreSQL a node charged outside the
// admission batches' turns, whose row locks they then wait on): with 64
// places, 64 callers sent 5% of their creates that way
// (docs/PERFORMANCE.md, "Places for 256 steps").
const DefaultWorkers = 256

// DefaultPlaceWait is the longest an admission waits for a free worker
// place unless WithPlaceWait says otherwise; after it, its command is
// admitted unclaimed (the long way, above). An admission that took the
// long way as soon as no place was free sent ctrl into a collapse under
// a load beyond what it places a second: the long way costs several
// times the short one, so each one admitted so left fewer places free
// for the next (docs/PERFORMANCE.md, "Waiting for a place"). Waiting,
// the calls queue at the rate ctrl places; the bound keeps a call from
// waiting for ever should every place be held by long steps.
const DefaultPlaceWait = 10 * time.Second

// admissionsAhead bounds the admissions waiting for a worker place at
// once beside the steps coming back from Idle (waitPlace).
const admissionsAhead = 16

// Option sets something of a Runner at construction.
type Option func(*Runner)

// WithMetrics makes the runner count the commands it ends in m
// (kibotos_commands_finished_total, kibotos_command_duration_seconds).
func WithMetrics(m *metrics.Metrics) Option { return func(r *Runner) { r.metrics = m } }

// WithWorkers sets how many steps the runner runs at once (DefaultWorkers
// unless set).
func WithWorkers(n int) Option { return func(r *Runner) { r.workers = max(n, 1) } }

// WithPlaceWait sets the longest an admission waits for a free worker
// place (DefaultPlaceWait unless set; 0 does not wait).
func WithPlaceWait(d time.Duration) Option { return func(r *Runner) { r.placeWait = max(d, 0) } }

// WithPoll sets how long the runner sleeps between looks for due
// commands when nothing kicks it (one second unless set).
func WithPoll(d time.Duration) Option { return func(r *Runner) { r.poll = d } }

// Handle registers the handler of kind.
func (r *Runner) Handle(kind string, h Handler) { r.handlers[kind] = h }

// Kick wakes the runner: a command was admitted or something it waits for
// happened. Other replicas notice by polling.
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Wake makes the commands due now and kicks the runner: what they waited
// for happened.
func (r *Runner) Wake(ctx context.Context, commandIDs ...string) error {
	err := r.store.Tx(ctx, func(tx *store.Tx) error {
		for _, id := range commandIDs {
			if err := tx.WakeCommand(id, r.now()); err != nil {
				return err
			}
		}
		return nil
	})
	r.Kick()
	return err
}

// WakeWaiting makes every WAITING command due now (a node connected, say)
// and kicks the runner.
func (r *Runner) WakeWaiting(ctx context.Context) error {
	err := r.store.Tx(ctx, func(tx *store.Tx) error { return tx.WakeWaiting(r.now()) })
	r.Kick()
	return err
}

// Run drives commands until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	r.mu.Lock()
	r.running = ctx
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		r.wg.Wait()
	}()
	for {
		for ctx.Err() == nil {
			c, err := r.claim(ctx)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				r.log.Error("claim command", "sweep", "command-runner", "err", err)
				break
			}
			failpoint.Hit(failpoint.Claimed, c.GetCommandId())
			r.sem <- struct{}{}
			r.wg.Add(1)
			go r.stepIn(ctx, c, nil)
		}
		timer := time.NewTimer(r.untilNext(ctx))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// stepIn runs a step in the worker place it holds, and gives the place
// back.
func (r *Runner) stepIn(ctx context.Context, c *store.CommandRow, begun any) {
	defer func() { <-r.sem; r.wg.Done() }()
	r.step(ctx, c, r.sem, begun)
}

// Do admits as command.Do does, and the first long command its
// transaction admits starts at once in a worker of this runner: the
// admission leases the command to it, as a claim would, so that no claim
// transaction follows and no poll. With no worker free, or Run not
// running, the command is left for a claim, and the runner is kicked. A
// crash after the admission committed leaves the command leased: a ctrl
// that is its database's only user releases the leases at start, and
// other replicas take it over once the lease ran out, as after a crash
// during any step.
func (r *Runner) Do(ctx context.Context, fn func(tx *store.Tx) error) error {
	runCtx, offer, err := r.offer(ctx)
	if err != nil {
		return err
	}
	adm, err := do(ctx, r.store, offer, fn)
	r.afterAdmission(runCtx, offer, adm, err)
	return err
}

// offer reserves a worker place for the command an admission may lease
// to this runner, and answers the context its step runs in and the offer
// to make; both nil when no place is free within the wait (reserve) or
// Run is not running. It fails with ctx's error when ctx ended while it
// waited for a place: the caller then admits nothing.
func (r *Runner) offer(ctx context.Context) (context.Context, *claimOffer, error) {
	runCtx := r.reserve(ctx)
	if runCtx == nil {
		return nil, nil, ctx.Err()
	}
	return runCtx, &claimOffer{owner: r.owner, until: r.now().Add(r.lease), takes: r.takes}, nil
}

// afterAdmission starts the step of the command the admission leased to
// the place offered, or gives the place back, and kicks the runner when
// a long command was admitted that no worker holds.
func (r *Runner) afterAdmission(runCtx context.Context, offer *claimOffer, adm *admissions, err error) {
	if offer != nil && offer.taken != nil {
		failpoint.Hit(failpoint.Claimed, offer.taken.GetCommandId())
		go r.stepIn(runCtx, offer.taken, offer.begun)
	} else if runCtx != nil {
		<-r.sem
		r.wg.Done()
	}
	if err == nil && adm.unclaimed() {
		r.Kick()
	}
}

// Running reports whether Run runs.
func (r *Runner) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running != nil
}

// reserve takes a worker place for a step Do starts, and answers the
// context steps run in; nil when Run is not running, or no place came
// free within placeWait, or before ctx ended (the caller's deadline: its
// admission then fails and admits nothing). Waiting admissions take
// their turns in the order they asked, and the steps coming back from
// Idle wait beside the few at the head of that queue (waitPlace).
func (r *Runner) reserve(ctx context.Context) context.Context {
	r.mu.Lock()
	running := r.running
	if running == nil || running.Err() != nil {
		r.mu.Unlock()
		return nil
	}
	r.wg.Add(1) // under mu: Run waits for it once it stopped
	r.mu.Unlock()
	select {
	case r.sem <- struct{}{}:
		return running
	default:
	}
	if r.placeWait > 0 && r.waitPlace(ctx, running) {
		return running
	}
	r.wg.Done()
	return nil
}

// waitPlace waits for a free place for reserve, within placeWait, and
// reports whether it took one. Admissions wait their turn among
// themselves first (queue), so that at most admissionsAhead of them wait
// for a place beside the steps coming back from Idle: those end
// placements begun and give their places back, and a step waiting behind
// every creation queued under a load beyond what ctrl places a second
// doubled the time to AVAILABLE (docs/PERFORMANCE.md, "Waiting for a
// place").
func (r *Runner) waitPlace(ctx, running context.Context) bool {
	t := time.NewTimer(r.placeWait)
	defer t.Stop()
	select {
	case r.queue <- struct{}{}:
		defer func() { <-r.queue }()
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	case <-running.Done():
		return false
	}
	select {
	case r.sem <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-running.Done():
	}
	return false
}

// takes reports whether the runner has a handler of kind.
func (r *Runner) takes(kind string) bool {
	_, ok := r.handlers[kind]
	return ok
}

func (r *Runner) claim(ctx context.Context) (*store.CommandRow, error) {
	var c *store.CommandRow
	err := r.store.Tx(ctx, func(tx *store.Tx) error {
		now := r.now()
		var err error
		for {
			c, err = tx.ClaimCommand(r.owner, now, now.Add(r.lease))
			if err != nil {
				return err
			}
			if _, ok := r.handlers[c.GetKind()]; ok {
				return nil
			}
			// No handler: a newer ctrl admitted a kind this one cannot run.
			// Leave it for a replica that can.
			c.LeaseUntil = now.Add(time.Minute)
			if err := tx.UpdateCommand(c); err != nil {
				return err
			}
		}
	})
	return c, err
}

// untilNext is how long to sleep before the next due command, at most poll.
func (r *Runner) untilNext(ctx context.Context) time.Duration {
	d := r.poll
	_ = r.store.Tx(ctx, func(tx *store.Tx) error {
		next, ok, err := tx.NextDue()
		if err == nil && ok {
			if until := next.Sub(r.now()); until < d {
				d = max(until, time.Millisecond)
			}
		}
		return err
	})
	return d
}

func (r *Runner) step(ctx context.Context, c *store.CommandRow, slot chan struct{}, begun any) {
	ctx, span := startStep(ctx, c)
	defer span.End()
	w := &Work{r: r, c: c, slot: slot, begun: begun}
	err := r.handlers[c.GetKind()](ctx, w)
	endStep(span, w, err)
	if err == nil && w.ended {
		return
	}
	if err == nil {
		err = fmt.Errorf("handler of %s ended the step without an outcome", c.GetKind())
	}
	if errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
		return
	}
	backoff := min(time.Duration(c.Attempts)*time.Second, 30*time.Second)
	r.log.WarnContext(ctx, "command step failed; retrying", "kind", c.GetKind(), "err", err, "retry_in", backoff)
	_ = w.update(ctx, func(_ *store.Tx, c *store.CommandRow) error {
		c.Progress = "retrying after: " + err.Error()
		c.NextAttemptAt = r.now().Add(backoff)
		c.LeaseUntil = time.Time{}
		return nil
	})
}

// ErrLeaseLost means another worker holds the command now; the step's
// writes were not made.
var ErrLeaseLost = errors.New("command lease lost")

// Work is one claimed step of a command.
type Work struct {
	r     *Runner
	c     *store.CommandRow
	ended bool
	// slot is the runner's worker semaphore this step holds a place in
	// (Idle gives it back while the step waits), nil for none.
	slot chan struct{}
	// begun is what the command's Effect.Begin answered at its admission,
	// for the step that follows it; nil for every other step.
	begun any
}

// Begun is what the command's Effect.Begin answered in the admission's
// transaction, when this step is the one that goes on from it; nil
// otherwise (every later step, and the first one after a claim).
func (w *Work) Begun() any { return w.begun }

// Command is the command as claimed.
func (w *Work) Command() *storev1.Command { return w.c.Command }

// Request decodes the admitted request.
func (w *Work) Request() (proto.Message, error) { return w.c.GetRequest().UnmarshalNew() }

// Now is the runner's clock.
func (w *Work) Now() time.Time { return w.r.now() }

// update changes the command and other records in one transaction, only if
// this worker still holds the command's lease.
func (w *Work) update(ctx context.Context, fn func(tx *store.Tx, c *store.CommandRow) error) error {
	var written *store.CommandRow
	err := w.r.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		written, err = w.updateIn(tx, fn)
		return err
	})
	if err == nil {
		// Only once committed: a transaction that failed after the write
		// (at its commit, or in a write left for last) leaves the command
		// as the worker knew it.
		w.c = written
	}
	if err == nil && !w.c.Final() {
		failpoint.Hit(failpoint.StepCommitted, w.c.GetCommandId())
	}
	return err
}

// updateIn is update's work in tx: the command as written.
func (w *Work) updateIn(tx *store.Tx, fn func(tx *store.Tx, c *store.CommandRow) error) (*store.CommandRow, error) {
	c, err := tx.GetCommand(w.c.GetCommandId(), true)
	if err != nil {
		return nil, err
	}
	if c.LeaseOwner != w.r.owner || !c.LeaseUntil.Equal(w.c.LeaseUntil) || c.Final() {
		return nil, ErrLeaseLost
	}
	if err := fn(tx, c); err != nil {
		return nil, err
	}
	c.UpdatedAt = timestamppb.New(w.r.now())
	if err := tx.UpdateCommand(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Succeed ends the command successfully after fn's writes.
func (w *Work) Succeed(ctx context.Context, fn func(tx *store.Tx) error) error {
	return w.end(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		succeeded(c)
		return fn(tx)
	})
}

// succeeded marks c SUCCEEDED.
func succeeded(c *store.CommandRow) {
	c.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
	c.WaitingFor = ""
}

// Fail ends the command with failure after fn's writes.
func (w *Work) Fail(ctx context.Context, failure *ctrlv1.WorkspaceFailure, fn func(tx *store.Tx) error) error {
	return w.end(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		c.State = storev1.CommandState_COMMAND_STATE_FAILED
		c.WaitingFor = ""
		failure.CommandId = c.GetCommandId()
		if failure.FailedAt == nil {
			failure.FailedAt = timestamppb.New(w.r.now())
		}
		c.Failure = failure
		return fn(tx)
	})
}

func (w *Work) end(ctx context.Context, fn func(tx *store.Tx, c *store.CommandRow) error) error {
	err := w.update(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		w.ending(c)
		return fn(tx, c)
	})
	w.ended = err == nil
	if w.ended {
		w.endCommitted(ctx)
	}
	return err
}

// ending sets what every end of the command sets.
func (w *Work) ending(c *store.CommandRow) {
	c.CompletedAt = timestamppb.New(w.r.now())
	c.Progress = ""
	c.LeaseUntil = time.Time{}
}

// endCommitted counts and logs the command's end once it committed.
func (w *Work) endCommitted(ctx context.Context) {
	c := w.c.Command
	took := c.GetCompletedAt().AsTime().Sub(c.GetAdmittedAt().AsTime())
	failed := c.GetState() == storev1.CommandState_COMMAND_STATE_FAILED
	w.r.metrics.CommandFinished(c.GetKind(), failed, took)
	if failed {
		w.r.log.WarnContext(ctx, "command failed", "kind", c.GetKind(), "target_id", c.GetTargetId(), "stage", c.GetFailure().GetStage(),
			"reason", c.GetFailure().GetReason(), "message", c.GetFailure().GetMessage(), "took", took.Round(time.Millisecond))
	} else {
		w.r.log.InfoContext(ctx, "command succeeded", "kind", c.GetKind(), "target_id", c.GetTargetId(), "took", took.Round(time.Millisecond))
	}
	failpoint.Hit(failpoint.Ended, c.GetCommandId())
}

// Wait parks the command: it cannot go on until something outside ctrl
// happens. reason says what, and GetWorkspaceCommand shows it. The command is
// tried again after retry, or sooner when the runner is kicked.
func (w *Work) Wait(ctx context.Context, reason string, retry time.Duration) error {
	return w.reschedule(ctx, storev1.CommandState_COMMAND_STATE_WAITING, reason, "", retry, nil)
}

// Continue records progress (and fn's writes) and runs the next step after
// retry, or sooner when the runner is kicked.
func (w *Work) Continue(ctx context.Context, progress string, retry time.Duration, fn func(tx *store.Tx, c *storev1.Command) error) error {
	return w.reschedule(ctx, storev1.CommandState_COMMAND_STATE_RUNNING, "", progress, retry, fn)
}

func (w *Work) reschedule(ctx context.Context, state storev1.CommandState, waitingFor, progress string, retry time.Duration, fn func(tx *store.Tx, c *storev1.Command) error) error {
	err := w.update(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		c.State = state
		c.WaitingFor = waitingFor
		c.Progress = progress
		// A wake while this step ran moved next_attempt_at (WakeCommand):
		// go on at once instead of after retry, or the wake is lost.
		woken := !c.NextAttemptAt.Equal(w.c.NextAttemptAt)
		c.NextAttemptAt = w.r.now().Add(retry)
		if woken {
			c.NextAttemptAt = w.r.now()
		}
		c.LeaseUntil = time.Time{}
		if fn != nil {
			return fn(tx, c.Command)
		}
		return nil
	})
	w.ended = err == nil
	if w.ended {
		// A step due again at once (retry 0, or woken) goes on now, not
		// at the runner's next poll (up to a second later).
		w.r.Kick()
	}
	return err
}
