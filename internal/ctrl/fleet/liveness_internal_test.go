package fleet

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// A start's report noted from its answer stays applied through the write
// of an observation the node took before the start (which does not list
// the execution), so the observations after it that say the same are not
// due; one that differs is, and an execution that ended is forgotten.
func TestANotedStartReportOutlivesAnOlderObservation(t *testing.T) {
	s := &session{}
	now := time.Now()
	report := &nodev1.ExecutionReport{InstanceId: "ws-a.1", Running: true, Responding: true}
	result, err := anypb.New(&nodev1.ExecutionStatus{InstanceId: "ws-a.1", Running: true, Report: report})
	if err != nil {
		t.Fatal(err)
	}
	running := func(reports ...*nodev1.ExecutionReport) *nodev1.NodeObservation {
		o := &nodev1.NodeObservation{Executions: reports}
		for _, r := range reports {
			o.InstanceIds = append(o.InstanceIds, r.GetInstanceId())
		}
		return o
	}
	other := &nodev1.ExecutionReport{InstanceId: "ws-b.1", Running: true, Responding: true}
	// The registration was written once, so nothing is due for a refresh.
	s.wrote(running(other), []*nodev1.ExecutionReport{other}, true, now)

	s.noteStartReport(&nodev1.CommandResult{OperationId: "op", Result: result})
	s.wrote(running(other), nil, false, now) // taken before the start
	_, reports, _, _ := s.observationDue(running(other, report), now, time.Hour, nil)
	if len(reports) != 0 {
		t.Errorf("reports due after the start's noted report: %v", reports)
	}

	unresponsive := &nodev1.ExecutionReport{InstanceId: "ws-a.1", Running: true}
	if _, reports, _, _ := s.observationDue(running(other, unresponsive), now, time.Hour, nil); len(reports) != 1 || reports[0] != unresponsive {
		t.Errorf("a report that differs from the noted one: due %v", reports)
	}

	ended := &nodev1.ExecutionReport{InstanceId: "ws-a.1", End: nodev1.ExecutionEnd_EXECUTION_END_STOPPED}
	s.wrote(running(other, ended), nil, false, now)
	if _, ok := s.obs.reports["ws-a.1"]; ok || s.obs.noted["ws-a.1"] {
		t.Errorf("an ended execution's report is kept: %v %v", s.obs.reports, s.obs.noted)
	}
}

// An execution whose start's answer a step waits for raw is awaited, so
// that an observation heard before the answer leaves its report to it,
// until the step stops waiting; a waiter that does not record the answer
// itself, or an operation that starts nothing, awaits no start.
func TestAStartWaitedForRawIsAwaited(t *testing.T) {
	a := &answerWaiters{}
	reports := []*nodev1.ExecutionReport{{InstanceId: "ws-a.1", Running: true}, {InstanceId: "ws-b.1", Running: true}, {InstanceId: "ws-c.1", Running: true}}
	waiting := a.expect("cmd-a/start", true)
	a.awaitStart("cmd-a/start", "ws-a.1")
	a.expect("cmd-b/start", false)
	a.awaitStart("cmd-b/start", "ws-b.1")
	a.expect("cmd-c/ensure", true)
	a.awaitStart("cmd-c/ensure", "")
	if got := a.awaitedStarts(reports); len(got) != 1 || !got["ws-a.1"] {
		t.Errorf("awaited starts %v, want ws-a.1 alone", got)
	}
	a.forgetHanded("cmd-a/start", waiting)
	if got := a.awaitedStarts(reports); got != nil {
		t.Errorf("awaited starts after the step stopped waiting: %v", got)
	}
}

// A session another replica holds is live until the lease its record
// carries (live_until) and lost after it; a record written before leases
// is live 75 s after it was last seen. The lease a holder writes is the
// 75 s every replica allowed before, at the default timings, and at a
// spread interval covers the next write (two intervals) and the silence
// limit after it.
func TestAnotherReplicasSessionIsLiveUntilItsLease(t *testing.T) {
	st := storetest.Open(t, storetest.PostgresDSN(t)) // shared: sessions are judged by their records
	f := New(st, nil, slog.New(slog.DiscardHandler), DefaultConfig, Deps{})
	now := time.Now()
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	for _, tc := range []struct {
		what string
		s    *operatorv1.NodeSessionSummary
		live bool
	}{
		{"a lease ahead, last seen long ago", &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: at(-10 * time.Minute), LiveUntil: at(time.Second)}, true},
		{"a lease passed, last seen just now", &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: at(-time.Second), LiveUntil: at(-time.Millisecond)}, false},
		{"no lease, seen 74 s ago", &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: at(-74 * time.Second)}, true},
		{"no lease, seen 76 s ago", &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: at(-76 * time.Second)}, false},
		{"recorded lost", &operatorv1.NodeSessionSummary{LastSeenAt: at(-time.Second), DisconnectedAt: at(-time.Second)}, false},
	} {
		if got := f.Live(&operatorv1.NodeRegistration{NodeId: "node-elsewhere", Session: tc.s}, now); got != tc.live {
			t.Errorf("%s: live %v, want %v", tc.what, got, tc.live)
		}
	}
	if got := f.lease(DefaultConfig.ObservationInterval); got != 75*time.Second {
		t.Errorf("the lease at the default interval: %v, want 75s", got)
	}
	if spread := 40 * time.Second; f.lease(spread) < 2*spread+silenceLimitFor(spread) {
		t.Errorf("the lease at a %v interval: %v, want at least two intervals and the silence limit (%v)", spread, f.lease(spread), 2*spread+silenceLimitFor(spread))
	}
}
