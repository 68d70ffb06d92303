package command_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/store"
)

// sample is the value of family name's series with labels (a counter's
// value, a histogram's count), 0 when there is none.
func sample(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if matches(s, labels) {
				if h := s.GetHistogram(); h != nil {
					return float64(h.GetSampleCount())
				}
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func matches(s *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range s.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// Admissions are counted once their transaction committed: not a
// rolled-back one, not a replay; a command final at admission also
// counts as succeeded. The runner counts a long command's end.
func TestMetricsCountCommittedAdmissionsAndEnds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *store.Store) {
		m := metrics.New()
		ctx, cancel := context.WithCancel(metrics.NewContext(context.Background(), m))
		defer cancel()
		admitIn := func(ctx context.Context, id string, long bool, after error) error {
			req := createVolume(id, 1<<30)
			return command.Do(ctx, s, func(tx *store.Tx) error {
				_, err := command.Admit(tx, time.Now(), id, "CreateVolume", req, func() (command.Effect, error) {
					v := &ctrlv1.Volume{VolumeId: "vol-" + id, Spec: req.GetSpec()}
					return command.Effect{Target: v.VolumeId, Result: &ctrlv1.CreateVolumeResponse{Volume: v}, Long: long}, tx.PutVolume(v)
				})
				if err != nil {
					return err
				}
				return after
			})
		}
		admitted := func() float64 {
			return sample(t, m, "kibotos_commands_admitted_total", map[string]string{"kind": "CreateVolume"})
		}
		finished := func(outcome string) float64 {
			return sample(t, m, "kibotos_commands_finished_total", map[string]string{"kind": "CreateVolume", "outcome": outcome})
		}

		rolledBack := errors.New("rolled back")
		if err := admitIn(ctx, "short-1", false, rolledBack); !errors.Is(err, rolledBack) {
			t.Fatal(err)
		}
		if got := admitted(); got != 0 {
			t.Fatalf("a rolled-back admission counted: admitted = %v", got)
		}
		for range 2 { // the second is a replay
			if err := admitIn(ctx, "short-1", false, nil); err != nil {
				t.Fatal(err)
			}
		}
		if admitted() != 1 || finished(metrics.OutcomeSucceeded) != 1 {
			t.Fatalf("after a short command and its replay: admitted %v, succeeded %v", admitted(), finished(metrics.OutcomeSucceeded))
		}

		r := command.NewRunner(s, "test-replica", slog.Default(), command.WithMetrics(m))
		r.Handle("CreateVolume", func(ctx context.Context, w *command.Work) error {
			return w.Fail(ctx, &ctrlv1.WorkspaceFailure{Message: "the test fails it"}, func(*store.Tx) error { return nil })
		})
		go r.Run(ctx)
		if err := admitIn(ctx, "long-1", true, nil); err != nil {
			t.Fatal(err)
		}
		if admitted() != 2 {
			t.Fatalf("admitted = %v after the long command", admitted())
		}
		r.Kick()
		waitFor(t, "the long command failed", func() bool { return commandState(t, s, "long-1").Final() })
		waitFor(t, "its end counted", func() bool { return finished(metrics.OutcomeFailed) == 1 })
		if got := sample(t, m, "kibotos_command_duration_seconds", map[string]string{"kind": "CreateVolume"}); got != 2 {
			t.Errorf("command durations observed: %v, want 2 (the short command's and the long one's)", got)
		}

		// Outside Do (an admission within a larger transaction) it is
		// counted at once.
		req := createVolume("inner-1", 1<<30)
		if err := s.Tx(ctx, func(tx *store.Tx) error {
			_, err := command.Admit(tx, time.Now(), "inner-1", "CreateVolume", req, func() (command.Effect, error) {
				return command.Effect{Target: "vol-inner-1", Result: &ctrlv1.CreateVolumeResponse{}, Long: true}, nil
			})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if admitted() != 3 {
			t.Errorf("admitted = %v after an admission outside Do", admitted())
		}
	})
}
