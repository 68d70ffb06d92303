package command_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

func forEachBackend(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, storetest.Open(t, b.DSN(t))) })
	}
}

func createVolume(id string, capacity uint64) *ctrlv1.CreateVolumeRequest {
	return &ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: id},
		Spec:    &ctrlv1.VolumeSpec{CapacityBytes: capacity},
	}
}

// admit admits req, making a Volume named after the command when new.
func admit(t *testing.T, s *store.Store, req *ctrlv1.CreateVolumeRequest, long bool, effects *int) (proto.Message, error) {
	t.Helper()
	var res proto.Message
	err := command.Do(context.Background(), s, func(tx *store.Tx) error {
		var err error
		res, err = command.Admit(tx, time.Now(), req.GetCommand().GetCommandId(), "CreateVolume", req, func() (command.Effect, error) {
			*effects++
			v := &ctrlv1.Volume{VolumeId: "vol-" + req.GetCommand().GetCommandId(), Spec: req.GetSpec(), Annotations: map[string]string{"effect": strconv.Itoa(*effects)}}
			return command.Effect{Target: v.VolumeId, Result: &ctrlv1.CreateVolumeResponse{Volume: v}, Long: long}, tx.PutVolume(v)
		})
		return err
	})
	return res, err
}

// A replay answers the recorded result and changes nothing. Admit finds
// a replay by its insert (or, after an effect failed, by a read) and its
// transaction runs again, so a replay's effect may run: what it wrote is
// rolled back, and an effect that fails on a replay is not its answer.
func TestReplayAnswersTheRecordedResultAndOtherInputConflicts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		effects := 0
		first, err := admit(t, s, createVolume("c1", 1<<30), false, &effects)
		if err != nil {
			t.Fatal(err)
		}
		again, err := admit(t, s, createVolume("c1", 1<<30), false, &effects)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(first, again) {
			t.Errorf("replay: %v, want %v", again, first)
		}
		_, err = admit(t, s, createVolume("c1", 2<<30), false, &effects)
		if connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("other input: %v, want already_exists", err)
		}
		var failing proto.Message
		err = command.Do(context.Background(), s, func(tx *store.Tx) error {
			var err error
			failing, err = command.Admit(tx, time.Now(), "c1", "CreateVolume", createVolume("c1", 1<<30), func() (command.Effect, error) {
				return command.Effect{}, connect.NewError(connect.CodeAlreadyExists, errors.New("the effect fails on a replay"))
			})
			return err
		})
		if err != nil || !proto.Equal(failing, first) {
			t.Errorf("replay whose effect fails: %v, %v; want %v", failing, err, first)
		}
		if err := s.Tx(context.Background(), func(tx *store.Tx) error {
			v, err := tx.GetVolume("vol-c1", false)
			if err == nil && (v.GetAnnotations()["effect"] != "1" || v.GetSpec().GetCapacityBytes() != 1<<30) {
				t.Errorf("the replays changed the first admission's effect: %v", v)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// An effect's failure is the admission's answer when the command is new;
// nothing is admitted.
func TestAnEffectsFailureIsTheAnswerOfANewCommand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		err := command.Do(context.Background(), s, func(tx *store.Tx) error {
			_, err := command.Admit(tx, time.Now(), "c-fails", "CreateVolume", createVolume("c-fails", 1<<30), func() (command.Effect, error) {
				return command.Effect{}, connect.NewError(connect.CodeFailedPrecondition, errors.New("the effect fails"))
			})
			return err
		})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("admission: %v, want the effect's failed_precondition", err)
		}
		if err := s.Tx(context.Background(), func(tx *store.Tx) error {
			if _, err := tx.GetCommand("c-fails", false); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the command: %v, want none admitted", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestInputHashIgnoresCommandMetadataAndPolicyRevision(t *testing.T) {
	a := &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
		Command:       &ctrlv1.CommandMetadata{CommandId: "x"},
		WorkspaceId:   "ws-1",
		NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Revision: 3},
	}
	b := proto.Clone(a).(*ctrlv1.UpdateWorkspaceNetworkPolicyRequest)
	b.Command.CommandId = "y"
	b.NetworkPolicy.Revision = 9
	if string(command.InputHash("K", a)) != string(command.InputHash("K", b)) {
		t.Error("requests differing only in command_id and policy revision hash differently")
	}
	b.NetworkPolicy.Allow = []string{"1.2.3.4"}
	if string(command.InputHash("K", a)) == string(command.InputHash("K", b)) {
		t.Error("different content hashes the same")
	}
	if string(command.InputHash("K", a)) == string(command.InputHash("L", a)) {
		t.Error("the kind is not part of the input")
	}
}

func TestValidateID(t *testing.T) {
	for id, ok := range map[string]bool{"": false, "a": true, "cli-0a:b.c_d": true, "has space": false, "é": false, string(make([]byte, 129)): false} {
		err := command.ValidateID("command.command_id", &ctrlv1.CommandMetadata{CommandId: id})
		if (err == nil) != ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func commandState(t *testing.T, s *store.Store, id string) *store.CommandRow {
	t.Helper()
	return command.StoredCommand(t, s, id)
}

func TestRunnerDrivesALongCommandThroughWaitToSuccess(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default())
		var ready atomic.Bool
		var steps atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			steps.Add(1)
			if !ready.Load() {
				return w.Wait(ctx, "the test is not ready", time.Hour)
			}
			return w.Succeed(ctx, func(tx *store.Tx) error {
				v, err := tx.GetVolume(w.Command().GetTargetId(), true)
				if err != nil {
					return err
				}
				v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
				return tx.PutVolume(v)
			})
		})
		go r.Run(ctx)
		effects := 0
		if _, err := admit(t, s, createVolume("long-1", 1<<30), true, &effects); err != nil {
			t.Fatal(err)
		}
		r.Kick()
		waitFor(t, "WAITING", func() bool {
			return commandState(t, s, "long-1").GetState() == storev1.CommandState_COMMAND_STATE_WAITING
		})
		if got := commandState(t, s, "long-1").GetWaitingFor(); got != "the test is not ready" {
			t.Errorf("waiting_for = %q", got)
		}
		ready.Store(true)
		if err := r.WakeWaiting(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "SUCCEEDED", func() bool { return commandState(t, s, "long-1").Final() })
		c := commandState(t, s, "long-1")
		if c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED || c.GetCompletedAt() == nil || steps.Load() != 2 {
			t.Errorf("command %v after %d steps", c.Command, steps.Load())
		}
	})
}

// A step whose lease was taken over writes nothing.
// runStep admits the long CreateVolume command id and runs its steps with
// step, on a runner of owner's that runs until the test ends.
func runStep(t *testing.T, s *store.Store, owner, id string, step command.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	effects := 0
	if _, err := admit(t, s, createVolume(id, 1<<30), true, &effects); err != nil {
		t.Fatal(err)
	}
	r := command.NewRunner(s, owner, slog.Default())
	r.Handle("CreateVolume", step)
	go r.Run(ctx)
	r.Kick()
}

func TestLostLeaseWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		stolen := make(chan struct{})
		var result atomic.Value
		runStep(t, s, "slow-replica", "lease-1", func(ctx context.Context, w *command.Work) error {
			// Another replica takes the command over while this step runs.
			if err := s.Tx(ctx, func(tx *store.Tx) error {
				c, err := tx.GetCommand("lease-1", true)
				if err != nil {
					return err
				}
				c.LeaseOwner = "other-replica"
				return tx.UpdateCommand(c)
			}); err != nil {
				return err
			}
			err := w.Succeed(ctx, func(tx *store.Tx) error { return nil })
			result.Store(err)
			close(stolen)
			return err
		})
		<-stolen
		if err, _ := result.Load().(error); err != command.ErrLeaseLost {
			t.Errorf("Succeed after the lease was taken: %v, want ErrLeaseLost", err)
		}
		if c := commandState(t, s, "lease-1"); c.Final() {
			t.Errorf("command finished by a worker without the lease: %v", c.Command)
		}
	})
}

// A step's write whose transaction then fails (here a write left for the
// transaction's end refuses) leaves the step's command as it was: the
// step goes on holding the lease it had, and ends the command.
func TestAStepWriteRolledBackLeavesTheStepsCommand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		refused := errors.New("refused at the end")
		type outcome struct{ held, ended error }
		done := make(chan outcome, 1)
		runStep(t, s, "test-replica", "undone-1", func(ctx context.Context, w *command.Work) error {
			var o outcome
			o.held = w.Hold(ctx, "a progress never committed", func(tx *store.Tx, c *storev1.Command) error {
				tx.Last(func(*store.Tx) error { return refused })
				return nil
			})
			if got := w.Command().GetProgress(); got == "a progress never committed" {
				t.Errorf("the step's command after a rolled-back write shows its progress %q", got)
			}
			o.ended = w.Succeed(ctx, func(*store.Tx) error { return nil })
			done <- o
			return o.ended
		})
		o := <-done
		if !errors.Is(o.held, refused) {
			t.Errorf("Hold: %v, want %v", o.held, refused)
		}
		if o.ended != nil {
			t.Errorf("Succeed after a rolled-back write: %v, want the command ended", o.ended)
		}
		if c := commandState(t, s, "undone-1"); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED {
			t.Errorf("command %v, want SUCCEEDED", c.GetState())
		}
	})
}

// A wake that arrives while the command's step runs is not lost: the step
// then parks it for an hour, yet it runs again at once.
func TestAWakeDuringAStepIsNotLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default())
		var steps atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			if steps.Add(1) == 1 {
				// What the step waits for happens while it runs.
				if err := r.Wake(ctx, w.Command().GetCommandId()); err != nil {
					return err
				}
				return w.Wait(ctx, "something outside", time.Hour)
			}
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		effects := 0
		if _, err := admit(t, s, createVolume("woken-1", 1<<30), true, &effects); err != nil {
			t.Fatal(err)
		}
		r.Kick()
		waitFor(t, "SUCCEEDED after the wake", func() bool { return commandState(t, s, "woken-1").Final() })
		if steps.Load() != 2 {
			t.Errorf("%d steps, want 2", steps.Load())
		}
	})
}

// A step that holds its command (Hold) keeps the lease, shows its
// progress, and waits in memory (Idle) without taking one of the runner's
// eight workers: with eight steps waiting so, a ninth command still runs,
// and each held command then ends in the same step, claimed once.
func TestAHeldStepWaitsWithoutAWorker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const holders = 8
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithWorkers(holders))
		lastRan := make(chan struct{})
		var held, steps atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			steps.Add(1)
			if w.Command().GetCommandId() == "last" {
				defer close(lastRan)
				return w.Succeed(ctx, func(*store.Tx) error { return nil })
			}
			if err := w.Hold(ctx, "handed out", nil); err != nil {
				return err
			}
			held.Add(1)
			w.Idle(func() { <-lastRan })
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		effects := 0
		for i := range holders {
			if _, err := admit(t, s, createVolume(fmt.Sprint("hold-", i), 1<<30), true, &effects); err != nil {
				t.Fatal(err)
			}
		}
		r.Kick()
		waitFor(t, "every holder held", func() bool { return held.Load() == holders })
		c := commandState(t, s, "hold-0")
		if c.LeaseOwner != "test-replica" || !c.LeaseUntil.After(time.Now()) || c.GetProgress() != "handed out" ||
			c.GetState() != storev1.CommandState_COMMAND_STATE_RUNNING {
			t.Errorf("a held command: owner %q, lease until %v, %v; want this replica's lease, RUNNING, its progress", c.LeaseOwner, c.LeaseUntil, c.Command)
		}
		if _, err := admit(t, s, createVolume("last", 1<<30), true, &effects); err != nil {
			t.Fatal(err)
		}
		r.Kick()
		for i := range holders {
			id := fmt.Sprint("hold-", i)
			waitFor(t, id+" SUCCEEDED", func() bool { return commandState(t, s, id).Final() })
			if c := commandState(t, s, id); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED || c.Attempts != 1 {
				t.Errorf("%s: %v after %d claims, want SUCCEEDED after one", id, c.GetState(), c.Attempts)
			}
		}
		if steps.Load() != holders+1 {
			t.Errorf("%d steps, want %d", steps.Load(), holders+1)
		}
	})
}

// admitVia admits req as a long command through r.Do.
func admitVia(t *testing.T, r *command.Runner, req *ctrlv1.CreateVolumeRequest) {
	t.Helper()
	admitBeginning(t, r, req, nil)
}

// admitBeginning admits req as a long command through r.Do, its first
// step begun by begin (Effect.Begin; nil for none) in tx.
func admitBeginning(t *testing.T, r *command.Runner, req *ctrlv1.CreateVolumeRequest, begin func(tx *store.Tx) func(*storev1.Command) (any, error)) {
	t.Helper()
	if err := r.Do(context.Background(), func(tx *store.Tx) error {
		_, err := command.Admit(tx, time.Now(), req.GetCommand().GetCommandId(), "CreateVolume", req, func() (command.Effect, error) {
			v := &ctrlv1.Volume{VolumeId: "vol-" + req.GetCommand().GetCommandId(), Spec: req.GetSpec()}
			eff := command.Effect{Target: v.VolumeId, Result: &ctrlv1.CreateVolumeResponse{Volume: v}, Long: true}
			if begin != nil {
				eff.Begin = begin(tx)
			}
			return eff, tx.PutVolume(v)
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A long command admitted through Runner.Do starts at once in a worker,
// leased to it by its admission: with the runner polling once an hour, the
// store sees the admission and the step's end, and no claim (nor the look
// for work a kick starts).
func TestACommandAdmittedThroughTheRunnerStartsWithoutAClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour))
		ended := make(chan error, 1)
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			err := w.Succeed(ctx, func(*store.Tx) error { return nil })
			ended <- err
			return err
		})
		base := s.Stats().Transactions
		go r.Run(ctx)
		// The runner's first look: a claim finding nothing, then the
		// read of when the next command is due; then it sleeps an hour.
		waitFor(t, "the runner's first look", func() bool { return r.Running() && s.Stats().Transactions-base >= 2 })
		before := s.Stats().Transactions
		admitVia(t, r, createVolume("at-once", 1<<30))
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
		if n := s.Stats().Transactions - before; n != 2 {
			t.Errorf("%d transactions from admission to the step's end, want 2 (admission, end)", n)
		}
		if c := commandState(t, s, "at-once"); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED || c.Attempts != 1 {
			t.Errorf("the command: %v after %d claims, want SUCCEEDED after one", c.GetState(), c.Attempts)
		}
	})
}

// admitBegun admits req through r.Do with an Effect.Begin that writes a
// Volume of its own (named after the command, "-begun") and answers its
// name, failing as fail says: in Begin itself, or in a write it leaves for
// last (store.Tx.Last).
func admitBegun(t *testing.T, r *command.Runner, req *ctrlv1.CreateVolumeRequest, fail string) {
	t.Helper()
	id := req.GetCommand().GetCommandId()
	admitBeginning(t, r, req, func(tx *store.Tx) func(*storev1.Command) (any, error) {
		return func(c *storev1.Command) (any, error) {
			c.Progress = "begun at admission"
			if err := tx.PutVolume(&ctrlv1.Volume{VolumeId: "vol-" + id + "-begun"}); err != nil {
				return nil, err
			}
			switch fail {
			case "begin":
				return nil, errors.New("Begin failed")
			case "last":
				tx.Last(func(*store.Tx) error { return errors.New("a write left for last failed") })
			}
			return "vol-" + id + "-begun", nil
		}
	})
}

// Effect.Begin begins a command's first step in its admission's
// transaction: the command is written RUNNING with what Begin set, and
// the step that goes on from it at once sees what Begin answered. Should
// the transaction fail once Begin ran, in Begin or in a write it left for
// last, the command is admitted again without it: nothing Begin wrote is
// kept, and the step sees nothing begun.
func TestAnAdmissionBeginsTheFirstStepOrIsMadeAgainWithout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour))
		type seen struct {
			begun    any
			state    storev1.CommandState
			progress string
		}
		steps := make(chan seen, 1)
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			steps <- seen{w.Begun(), w.Command().GetState(), w.Command().GetProgress()}
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", func() bool { return r.Running() })
		for _, fail := range []string{"", "begin", "last"} {
			id := "begun-" + fail
			admitBegun(t, r, createVolume(id, 1<<30), fail)
			got := <-steps
			err := s.Tx(ctx, func(tx *store.Tx) error { _, err := tx.GetVolume("vol-"+id+"-begun", false); return err })
			if fail == "" {
				if got.begun != "vol-"+id+"-begun" || got.state != storev1.CommandState_COMMAND_STATE_RUNNING || got.progress != "begun at admission" || err != nil {
					t.Errorf("begun: the step saw %+v and Begin's write %v; want what Begin answered, RUNNING, its progress, its write", got, err)
				}
				continue
			}
			if got.begun != nil || got.state != storev1.CommandState_COMMAND_STATE_ADMITTED || got.progress != "" || !errors.Is(err, store.ErrNotFound) {
				t.Errorf("failing in %s: the step saw %+v and Begin's write %v; want nothing begun, ADMITTED, nothing written", fail, got, err)
			}
			waitFor(t, id+" SUCCEEDED", func() bool { return commandState(t, s, id).Final() })
		}
	})
}

// With every worker busy past the runner's place wait (none here),
// Runner.Do admits the command unleased and kicks the runner (which polls
// once an hour here): it runs once a worker is free, claimed once.
func TestACommandAdmittedWithNoWorkerFreeWaitsForAClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const workers = 8
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour), command.WithWorkers(workers), command.WithPlaceWait(0))
		release := make(chan struct{})
		var busy atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			if w.Command().GetCommandId() != "ninth" {
				busy.Add(1)
				<-release
			}
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", func() bool { return r.Running() })
		for i := range workers {
			admitVia(t, r, createVolume(fmt.Sprint("busy-", i), 1<<30))
		}
		waitFor(t, "every worker busy", func() bool { return busy.Load() == workers })
		admitVia(t, r, createVolume("ninth", 1<<30))
		if c := commandState(t, s, "ninth"); c.Final() {
			t.Errorf("the ninth ended with every worker busy: %v", c.Command)
		}
		close(release)
		waitFor(t, "the ninth SUCCEEDED", func() bool { return commandState(t, s, "ninth").Final() })
		if c := commandState(t, s, "ninth"); c.Attempts != 1 {
			t.Errorf("the ninth ended after %d claims, want 1", c.Attempts)
		}
	})
}

// With every worker busy, Runner.Do waits for a free one (within the
// runner's place wait) rather than admitting its command unclaimed: a
// caller whose deadline passes first is answered deadline_exceeded and
// nothing is admitted; a caller that waits on gets the place the busy
// step gives back, and its command's step runs there, begun at its
// admission (a step a claim started would have nothing begun).
func TestAnAdmissionWaitsForAFreeWorker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour), command.WithWorkers(1), command.WithPlaceWait(time.Minute))
		busy, release := make(chan struct{}), make(chan struct{})
		begun := make(chan any, 1)
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			if w.Command().GetCommandId() == "busy" {
				close(busy)
				<-release
			} else {
				begun <- w.Begun()
			}
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", r.Running)
		admitVia(t, r, createVolume("busy", 1<<30))
		<-busy

		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		defer stop()
		late := createVolume("late", 1<<30)
		err := r.Do(short, func(tx *store.Tx) error {
			_, err := command.Admit(tx, time.Now(), "late", "CreateVolume", late, func() (command.Effect, error) {
				return command.Effect{Target: "vol-late", Result: &ctrlv1.CreateVolumeResponse{}, Long: true}, tx.PutVolume(&ctrlv1.Volume{VolumeId: "vol-late"})
			})
			return err
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("an admission whose deadline passed waiting for a worker: %v, want its deadline exceeded", err)
		}
		if err := s.Tx(ctx, func(tx *store.Tx) error { _, err := tx.GetCommand("late", false); return err }); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the late command after its caller's deadline: %v, want none admitted", err)
		}

		admitted := make(chan struct{})
		go func() {
			defer close(admitted)
			admitBegun(t, r, createVolume("queued", 1<<30), "")
		}()
		close(release)
		<-admitted
		if got := <-begun; got != "vol-queued-begun" {
			t.Errorf("the queued command's step saw %v begun, want what its admission began", got)
		}
		waitFor(t, "queued SUCCEEDED", func() bool { return commandState(t, s, "queued").Final() })
	})
}

// Steps doing heavy work keep to eight at once (Work.Heavy), however many
// workers the runner has: a ninth waits, WAITING for a place, and runs
// once one is free; steps without heavy work run beside them meanwhile.
func TestHeavyWorkKeepsToEightStepsAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default())
		const heavy = 8
		release := make(chan struct{})
		var running, most atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			if w.Command().GetCommandId() == "light" {
				return w.Succeed(ctx, func(*store.Tx) error { return nil })
			}
			ran, err := w.Heavy(ctx, "test loads", func() error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				return nil
			})
			if !ran || err != nil {
				return err
			}
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", func() bool { return r.Running() })
		for i := range heavy + 1 {
			admitVia(t, r, createVolume(fmt.Sprint("heavy-", i), 1<<30))
		}
		waitFor(t, "eight heavy steps running", func() bool { return running.Load() == heavy })
		waiting := ""
		waitFor(t, "the ninth WAITING for a place", func() bool {
			for i := range heavy + 1 {
				if c := commandState(t, s, fmt.Sprint("heavy-", i)); c.GetState() == storev1.CommandState_COMMAND_STATE_WAITING {
					waiting = c.GetWaitingFor()
					return true
				}
			}
			return false
		})
		if want := "a free place among the 8 test loads this ctrl runs at once"; waiting != want {
			t.Errorf("waiting_for %q, want %q", waiting, want)
		}
		admitVia(t, r, createVolume("light", 1<<30))
		waitFor(t, "a light step beside them", func() bool { return commandState(t, s, "light").Final() })
		close(release)
		for i := range heavy + 1 {
			id := fmt.Sprint("heavy-", i)
			waitFor(t, id+" SUCCEEDED", func() bool { return commandState(t, s, id).Final() })
		}
		if most.Load() != heavy {
			t.Errorf("%d heavy steps ran at once, want at most (and here exactly) %d", most.Load(), heavy)
		}
	})
}

// A runner runs more steps at once than it does heavy ones: 256 by
// default, so placements do not queue for a worker behind steps waiting
// for the database, nor miss one at their admission.
func TestARunnerRunsItsDefaultWorkersStepsAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default())
		release := make(chan struct{})
		var busy atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			busy.Add(1)
			<-release
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", func() bool { return r.Running() })
		for i := range command.DefaultWorkers {
			admitVia(t, r, createVolume(fmt.Sprint("busy-", i), 1<<30))
		}
		waitFor(t, "every step running", func() bool { return busy.Load() == command.DefaultWorkers })
		close(release)
		for i := range command.DefaultWorkers {
			id := fmt.Sprint("busy-", i)
			waitFor(t, id+" SUCCEEDED", func() bool { return commandState(t, s, id).Final() })
		}
	})
}

// Steps that end together all end, and their writes commit: one whose
// write fails in the shared transaction fails none of the others, and
// ends alone once it succeeds (Work.SucceedTogether).
func TestStepsEndedTogetherAllEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const n = 8
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour))
		var arrived sync.WaitGroup
		arrived.Add(n)
		var refusals atomic.Int32
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			arrived.Done()
			arrived.Wait() // every step ends at once
			return w.SucceedTogether(ctx, func(tx *store.Tx) error {
				v, err := tx.GetVolume(w.Command().GetTargetId(), true)
				if err != nil {
					return err
				}
				if v.GetVolumeId() == "vol-together-3" && refusals.Add(1) == 1 {
					return errors.New("refused once")
				}
				v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
				return tx.PutVolume(v)
			})
		})
		go r.Run(ctx)
		effects := 0
		for i := range n {
			if _, err := admit(t, s, createVolume(fmt.Sprintf("together-%d", i), 1<<30), true, &effects); err != nil {
				t.Fatal(err)
			}
		}
		r.Kick()
		for i := range n {
			id := fmt.Sprintf("together-%d", i)
			waitFor(t, id+" ended", func() bool { return commandState(t, s, id).Final() })
			if c := commandState(t, s, id); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED {
				t.Errorf("command %s %v, want SUCCEEDED", id, c.GetState())
			}
			if err := s.Tx(ctx, func(tx *store.Tx) error {
				v, err := tx.GetVolume("vol-"+id, false)
				if err == nil && v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
					t.Errorf("Volume of %s %v, want AVAILABLE", id, v.GetState())
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		if got := refusals.Load(); got < 2 {
			t.Errorf("the refused write ran %d times, want it run again alone", got)
		}
	})
}

// Admissions made together (Runner.DoTogether) are each admitted as they
// would be alone: a long command starts at once in a worker, without a
// claim; a replay answers what was recorded; an effect that fails fails
// only its own caller, whose writes are not kept: the others of its
// batch are admitted after it, each alone.
func TestAdmissionsMadeTogetherAreEachAdmitted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithPoll(time.Hour))
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			return w.Succeed(ctx, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		waitFor(t, "the runner running", func() bool { return r.Running() })
		effects := 0
		if _, err := admit(t, s, createVolume("together-replayed", 1<<30), false, &effects); err != nil {
			t.Fatal(err)
		}
		const n = 12
		var wg sync.WaitGroup
		errs := make([]error, n)
		results := make([]proto.Message, n)
		for i := range n {
			id := fmt.Sprint("together-", i)
			if i == 0 {
				id = "together-replayed"
			}
			req := createVolume(id, 1<<30)
			wg.Go(func() {
				errs[i] = r.DoTogether(ctx, func(tx *store.Tx) error {
					var err error
					results[i], err = command.Admit(tx, time.Now(), id, "CreateVolume", req, func() (command.Effect, error) {
						v := &ctrlv1.Volume{VolumeId: "vol-" + id, Spec: req.GetSpec()}
						if err := tx.PutVolume(v); err != nil {
							return command.Effect{}, err
						}
						if i == 1 {
							return command.Effect{}, errors.New("always refused")
						}
						return command.Effect{Target: v.VolumeId, Result: &ctrlv1.CreateVolumeResponse{Volume: v}, Long: true}, nil
					})
					return err
				})
			})
		}
		wg.Wait()
		for i := range n {
			id := fmt.Sprint("together-", i)
			switch i {
			case 0:
				if errs[i] != nil || results[i].(*ctrlv1.CreateVolumeResponse).GetVolume().GetAnnotations()["effect"] != "1" {
					t.Errorf("the replay: %v, %v; want the recorded result", results[i], errs[i])
				}
				continue
			case 1:
				if errs[i] == nil || errs[i].Error() != "always refused" {
					t.Errorf("the refused admission: %v, want its effect's error", errs[i])
				}
				if err := s.Tx(ctx, func(tx *store.Tx) error { _, err := tx.GetVolume("vol-"+id, false); return err }); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("the refused admission's Volume: %v, want none kept", err)
				}
				continue
			}
			if errs[i] != nil {
				t.Errorf("admission %s: %v", id, errs[i])
				continue
			}
			waitFor(t, id+" ended", func() bool { return commandState(t, s, id).Final() })
			if c := commandState(t, s, id); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED || c.Attempts != 1 {
				t.Errorf("command %s: %v after %d claims, want SUCCEEDED after one", id, c.GetState(), c.Attempts)
			}
		}
	})
}
