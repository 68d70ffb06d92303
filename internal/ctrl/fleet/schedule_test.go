package fleet_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The observations ctrl asks of its fleet stay within MaxObservationRate:
// each node held is asked to report less often as sessions are added (its
// welcome, then a SessionSchedule on a session already open), and more
// often again as they end.
func TestObservationsStayWithinTheFleetsBudget(t *testing.T) {
	// Two observations a second in all, each node every 500 ms at least:
	// one session reports every 500 ms, two every second each.
	c := testenv.New(t, testenv.WithFleet(fleet.Config{
		ObservationInterval: 500 * time.Millisecond, ClockProbeInterval: 200 * time.Millisecond,
		ClockTolerance: 10 * time.Second, MaxObservationRate: 2,
	}))
	a, welcome := openSession(t, c, "node-a")
	if got := welcome.GetObservationInterval().AsDuration(); got != 500*time.Millisecond {
		t.Errorf("the first session's welcome asks for an observation every %v; want 500ms", got)
	}
	b, welcome := openSession(t, c, "node-b")
	if got := welcome.GetObservationInterval().AsDuration(); got != time.Second {
		t.Errorf("the second session's welcome asks for an observation every %v; want 1s", got)
	}
	if got := nextSchedule(t, a); got != time.Second {
		t.Errorf("with a second session the first is asked for an observation every %v; want 1s", got)
	}
	if err := b.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if got := nextSchedule(t, a); got != 500*time.Millisecond {
		t.Errorf("alone again the first session is asked for an observation every %v; want 500ms", got)
	}
}

// nextSchedule reads the session's messages (clock probes, unanswered)
// until a SessionSchedule, and answers its interval.
func nextSchedule(t *testing.T, stream *connect.BidiStreamForClient[nodev1.SessionRequest, nodev1.SessionResponse]) time.Duration {
	t.Helper()
	for {
		msg, err := stream.Receive()
		if err != nil {
			t.Fatalf("the session ended before a schedule: %v", err)
		}
		if s := msg.GetSchedule(); s != nil {
			return s.GetObservationInterval().AsDuration()
		}
	}
}
