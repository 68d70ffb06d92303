package fleet_test

import (
	"testing"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node/state"
	"github.com/kibotos/kibotos/internal/testenv"
)

// openRawSession opens a control session as node id, with a hello and
// nothing more: the test sends what it means to (send), and answers the
// clock probes ctrl sends (probes) only if it means to.
func openRawSession(t *testing.T, c *testenv.Cluster, id state.Identity) (send func(*nodev1.SessionRequest) error, probes <-chan uint64) {
	t.Helper()
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	stream := client.Session(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+id.Credential)
	stream.RequestHeader().Set(fleet.HeaderNodeID, id.NodeID)
	if err := stream.Send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: &nodev1.NodeHello{
		NodeId: id.NodeID, Incarnation: id.Incarnation,
		Resources: &nodev1.HostResources{CpuMillis: 1000, MemoryBytes: 1 << 30},
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Receive(); err != nil {
		t.Fatal(err)
	}
	// Drain what ctrl sends so the stream never blocks, keeping the
	// latest probes.
	ids := make(chan uint64, 16)
	go func() {
		for {
			msg, err := stream.Receive()
			if err != nil {
				return
			}
			if p := msg.GetClockProbe(); p != nil {
				select {
				case ids <- p.GetProbeId():
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { _ = stream.CloseRequest(); _ = stream.CloseResponse() })
	return stream.Send, ids
}

// observation_version never goes back, though observations that change
// nothing are versioned in memory only: not when the node opens a new
// session before ctrl saw the old one go (a half-open connection), and
// not after a ctrl restart (firstVersion).
func TestObservationVersionNeverGoesBack(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	n.Stop(t)
	id := identity(t, n)

	sendA, _ := openRawSession(t, c, id)
	first := c.Registration(t, "node-a").GetObservation().GetObservationVersion()
	mem := uint64(1 << 30)
	obs := &nodev1.SessionRequest{Message: &nodev1.SessionRequest_Observation{Observation: &nodev1.NodeObservation{MemoryAvailableBytes: &mem}}}
	var high uint64
	testenv.WaitFor(t, "observation_version to advance by 10 on session A", func() bool {
		if err := sendA(obs); err != nil {
			t.Fatal(err)
		}
		high = c.Registration(t, "node-a").GetObservation().GetObservationVersion()
		return high >= first+10
	})

	// The node comes back over a new connection before ctrl saw the old one go.
	_, _ = openRawSession(t, c, id)
	got := c.Registration(t, "node-a").GetObservation().GetObservationVersion()
	if got <= high {
		t.Errorf("observation_version went back from %d to %d when the session was replaced", high, got)
	}
}
