// Package command admits mutations durably and drives long ones to a final
// state.
//
// Admission writes the command and its first effect in one transaction. A
// replay with the same command_id and the same input answers the recorded
// result, even after the work finished and after a ctrl restart; the same
// command_id with different input is already_exists. Long commands are then
// picked up by a Runner, which leases them so that one worker (of one ctrl
// replica) drives each, and resumes them after a crash once the lease runs
// out.
package command

import (
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidateID checks a command_id: 1 to 128 characters of [A-Za-z0-9._:-].
// field is where it sits in the request.
func ValidateID(field string, m *ctrlv1.CommandMetadata) error {
	if m.GetCommandId() == "" {
		return apierr.Invalid(field, "is required: every mutation carries a command_id")
	}
	if !idPattern.MatchString(m.GetCommandId()) {
		return apierr.Invalid(field, "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	}
	return nil
}

// Effect is what admitting a new command did.
type Effect struct {
	// Target is the object the command acts on (a Workspace, Volume, node).
	Target string
	// Result is the response to answer now and on every replay.
	Result proto.Message
	// Long commands are left ADMITTED for a Runner; the others are final at
	// once.
	Long bool
	// Begin, when set, begins a long command's first step in the admitting
	// transaction, when the admission leases the command to a worker of
	// this ctrl (Runner.Do with a worker free), which then runs that step
	// at once. It may set the command's node and progress before the
	// command is first written (written RUNNING then), and what it answers
	// is handed to the step (Work.Begun), which goes on from there: a
	// create's placement, decided and written with its admission, saves a
	// transaction that would read and write the command, the Workspace
	// and its runtime again (docs/PLACEMENT-LOOP.md). Should the
	// transaction fail once Begin ran (Begin's error, or a write it left
	// for last: store.Tx.Last), the admission runs again without it, and
	// the step does what Begin would have: a placement never fails an
	// admission.
	Begin func(c *storev1.Command) (any, error)
}

// Admit admits the command commandID of kind with request req in tx, or
// replays it. For a new command it calls effect, which writes the command's
// first effect in the same transaction. It returns the result to answer.
func Admit(tx *store.Tx, now time.Time, commandID, kind string, req proto.Message, effect func() (Effect, error)) (proto.Message, error) {
	hash := InputHash(kind, req)
	readFirst := readsFirst(tx.Context())
	if readFirst {
		if existing, err := tx.GetCommand(commandID, true); err == nil {
			return replay(existing, hash)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	eff, err := effect()
	if err != nil {
		if !readFirst && admittedAlready(tx, commandID) {
			return nil, errRaced // a replay: its effect is not this error
		}
		return nil, err
	}
	reqAny, err := anypb.New(req)
	if err != nil {
		return nil, err
	}
	resAny, err := anypb.New(eff.Result)
	if err != nil {
		return nil, err
	}
	state := storev1.CommandState_COMMAND_STATE_SUCCEEDED
	if eff.Long {
		state = storev1.CommandState_COMMAND_STATE_ADMITTED
	}
	ts := timestamppb.New(now)
	row := &store.CommandRow{
		Command: &storev1.Command{
			CommandId: commandID, Kind: kind, TargetId: eff.Target, State: state,
			Request: reqAny, Result: resAny, AdmittedAt: ts, UpdatedAt: ts,
			// The runner's steps join the admitting request's trace.
			Traceparent: telemetry.Traceparent(tx.Context()),
			RequestId:   telemetry.RequestID(tx.Context()),
		},
		InputHash:     hash,
		NextAttemptAt: now,
	}
	if !eff.Long {
		row.CompletedAt = ts
	}
	offer := offered(tx.Context(), eff.Long, kind)
	if offer != nil {
		row.LeaseOwner, row.LeaseUntil, row.Attempts = offer.owner, offer.until, 1
		if eff.Begin != nil && !offer.noBegin {
			offer.beginTried = true
			if offer.begun, err = offer.begin(tx.Context(), row.Command, eff.Begin); err != nil {
				return nil, err
			}
			row.State = storev1.CommandState_COMMAND_STATE_RUNNING
		}
	}
	inserted, err := tx.InsertCommand(row)
	if err != nil {
		return nil, err
	}
	if !inserted {
		// Admitted already (a replay, when the transaction did not read
		// first), or a concurrent admission of the same command_id
		// committed first (PostgreSQL): undo ours and answer as a replay
		// would.
		return nil, errRaced
	}
	if offer != nil {
		offer.taken = row
	}
	admitted(tx.Context(), admission{id: commandID, kind: kind, target: eff.Target, final: !eff.Long, claimed: offer != nil})
	return eff.Result, nil
}

// readsFirst reports whether an admission in ctx reads its command before
// its effect, to find a replay. In a Do's first run it does not: the
// command's insert finds a replay instead (it inserts nothing when the
// command_id is taken), and so does a read after an effect that failed;
// either makes the run roll back, and Do runs it again reading first. A
// replay costs a second run; every admission saves a statement (issue 15).
// An admission within another transaction always reads first: no one
// would run it again.
func readsFirst(ctx context.Context) bool {
	adm, ok := ctx.Value(admissionsKey{}).(*admissions)
	return !ok || adm.readFirst
}

// admittedAlready reports whether commandID was admitted, read after its
// effect failed. A read that fails (the effect's error may have aborted
// the transaction) says no: the effect's error stands.
func admittedAlready(tx *store.Tx, commandID string) bool {
	_, err := tx.GetCommand(commandID, false)
	return err == nil
}

// Do runs an admitting transaction, once more when the same command was
// admitted concurrently so that the second run answers as a replay. The
// commands its transaction admitted are counted (metrics) once it
// committed: not those of a run rolled back and run again.
func Do(ctx context.Context, s *store.Store, fn func(tx *store.Tx) error) error {
	_, err := do(ctx, s, nil, fn)
	return err
}

// do is Do, offering a runner's worker to the first long command the
// transaction admits (offer, nil for none). It answers what the committed
// run admitted.
func do(ctx context.Context, s *store.Store, offer *claimOffer, fn func(tx *store.Tx) error) (*admissions, error) {
	adm := &admissions{offer: offer}
	ctx = context.WithValue(ctx, admissionsKey{}, adm)
	run := func(tx *store.Tx) error {
		adm.reset()
		return fn(tx)
	}
	err := s.Tx(ctx, run)
	for raced := false; err != nil; {
		switch {
		case IsRaced(err) && !raced:
			raced, adm.readFirst = true, true
		case offer != nil && offer.beginTried && !offer.noBegin:
			offer.noBegin = true // Effect.Begin: admitted without it
		default:
			if offer != nil {
				offer.taken, offer.begun = nil, nil
			}
			return nil, err
		}
		err = s.Tx(ctx, run)
	}
	adm.committed(ctx)
	return adm, nil
}

// reset forgets what a run of the admitting transaction admitted, as it
// runs again.
func (a *admissions) reset() {
	a.list = a.list[:0]
	if a.offer != nil {
		a.offer.taken, a.offer.begun, a.offer.beginTried = nil, nil, false
	}
}

// committed counts and logs, in ctx, what the admitting transaction
// admitted once it committed.
func (a *admissions) committed(ctx context.Context) {
	m := metrics.FromContext(ctx)
	for _, c := range a.list {
		failpoint.Hit(failpoint.Admitted, c.id)
		c.count(m)
		c.log(ctx)
	}
}

// admission is one command a transaction admitted.
type admission struct {
	id, kind, target string
	// final: the command was final at admission (not long): it
	// succeeded as it was admitted.
	final bool
	// claimed: the admission leased the command to the worker offered.
	claimed bool
}

func (a admission) count(m *metrics.Metrics) {
	m.CommandAdmitted(a.kind)
	if a.final {
		m.CommandFinished(a.kind, false, 0)
	}
}

// log says the command was admitted, in ctx's request: the line that ties
// the request_id to the command_id the runner's lines carry.
func (a admission) log(ctx context.Context) {
	telemetry.Logger(ctx).InfoContext(telemetry.WithCommandID(ctx, a.id), "command admitted", "kind", a.kind, "target_id", a.target, "final", a.final)
}

// admissions are what a Do's transaction admitted in its current run.
type admissions struct {
	list  []admission
	offer *claimOffer
	// readFirst: the transaction runs again after it found a command
	// admitted already, and reads it first this time (readsFirst).
	readFirst bool
}

// unclaimed reports whether a long command was admitted that no worker
// holds yet: a runner must claim it.
func (a *admissions) unclaimed() bool {
	for _, c := range a.list {
		if !c.final && !c.claimed {
			return true
		}
	}
	return false
}

// claimOffer is a runner worker reserved for the command a transaction
// admits: the admission writes the command leased to it (owner, until),
// as a claim would, and taken is the row written.
type claimOffer struct {
	owner string
	until time.Time
	takes func(kind string) bool
	taken *store.CommandRow
	// begun is what the taken command's Effect.Begin answered (nil when
	// it had none); beginTried says Begin ran in the transaction's
	// current run, and noBegin that the admission runs without it.
	begun      any
	beginTried bool
	noBegin    bool
	// traceparent is the span of the Begin running (OperationTraceparent).
	traceparent string
}

// offered is the claim offer of ctx's Do for a command of kind, nil when
// there is none, the command is not long, the offer was taken already, or
// the runner has no handler of kind.
func offered(ctx context.Context, long bool, kind string) *claimOffer {
	adm, ok := ctx.Value(admissionsKey{}).(*admissions)
	if !ok || !long || adm.offer == nil || adm.offer.taken != nil || !adm.offer.takes(kind) {
		return nil
	}
	return adm.offer
}

type admissionsKey struct{}

// admitted counts and logs an admission once its transaction commits: at the end
// of Do, when ctx is a Do's (an Egress update's follow-ups are). An
// admission inside another transaction (a pool cleanup a running move
// admits) is counted at once; if that transaction rolls back and runs
// again, it is counted again.
func admitted(ctx context.Context, a admission) {
	if adm, ok := ctx.Value(admissionsKey{}).(*admissions); ok {
		adm.list = append(adm.list, a)
		return
	}
	a.count(metrics.FromContext(ctx))
	a.log(ctx)
}

// errRaced makes the caller's transaction roll back and run again, when it
// finds the command admitted.
var errRaced = errors.New("command admitted concurrently")

// IsRaced reports whether a transaction should be retried because the same
// command was admitted concurrently.
func IsRaced(err error) bool { return errors.Is(err, errRaced) }

func replay(existing *store.CommandRow, hash []byte) (proto.Message, error) {
	if string(existing.InputHash) != string(hash) {
		return nil, apierr.Conflict(existing.GetCommandId())
	}
	return existing.GetResult().UnmarshalNew()
}

// InputHash identifies a command's input: its kind and its request without
// CommandMetadata and without NetworkPolicy.revision, which the server
// ignores ("two requests that differ only here are the same command").
func InputHash(kind string, req proto.Message) []byte {
	clone := proto.Clone(req)
	scrub(clone.ProtoReflect())
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(clone)
	if err != nil {
		panic(err) // only invalid UTF-8 fails, and requests are decoded already
	}
	sum := sha256.New()
	sum.Write([]byte(kind))
	sum.Write([]byte{0})
	sum.Write(b)
	return sum.Sum(nil)
}

var (
	commandMetadataName = (&ctrlv1.CommandMetadata{}).ProtoReflect().Descriptor().FullName()
	networkPolicyName   = (&ctrlv1.NetworkPolicy{}).ProtoReflect().Descriptor().FullName()
)

// scrub clears what does not make a command's input, recursively.
func scrub(m protoreflect.Message) {
	if m.Descriptor().FullName() == networkPolicyName {
		m.Clear(m.Descriptor().Fields().ByName("revision"))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		if fd.Message().FullName() == commandMetadataName {
			m.Clear(fd)
			return true
		}
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				scrub(v.List().Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					scrub(mv.Message())
					return true
				})
			}
		default:
			scrub(v.Message())
		}
		return true
	})
}
