package fleet_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/testenv"
)

// stringsOf collects every string field of m, nested messages, lists and
// maps included.
func stringsOf(m protoreflect.Message) []string {
	var out []string
	var value func(fd protoreflect.FieldDescriptor, v protoreflect.Value)
	value = func(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
		switch fd.Kind() {
		case protoreflect.StringKind:
			out = append(out, v.String())
		case protoreflect.MessageKind, protoreflect.GroupKind:
			out = append(out, stringsOf(v.Message())...)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				value(fd, v.List().Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, k.String())
				value(fd.MapValue(), mv)
				return true
			})
		default:
			value(fd, v)
		}
		return true
	})
	return out
}

// What the operator reads about nodes and their pools names no transport
// locator (no URL, no address the node connects from or serves its data
// endpoint on) and no provider locator (no path on the host: pool
// directories, the agent's state, its executions).
func TestRegistrationsExposeNoTransportOrProviderLocators(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	testenv.WaitFor(t, "a clock measurement and a usage sample", func() bool {
		reg := c.Registration(t, "node-a")
		return reg.GetSession().GetClock() != nil && reg.GetHostUsage() != nil
	})
	list, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	pools, err := c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	locators := []string{"://", "127.0.0.1", "localhost", n.StateDir, n.PoolDir, os.TempDir()}
	for _, m := range []proto.Message{c.Registration(t, "node-a"), list.Msg, pools.Msg} {
		for _, s := range stringsOf(m.ProtoReflect()) {
			for _, l := range locators {
				if strings.Contains(s, l) {
					t.Errorf("%T exposes %q, which contains the locator %q", m, s, l)
				}
			}
		}
	}
}

// clockOf waits for ctrl's clock measurement of node id.
func clockOf(t *testing.T, c *testenv.Cluster, id string) *operatorv1.NodeRegistration {
	t.Helper()
	var reg *operatorv1.NodeRegistration
	testenv.WaitFor(t, "a clock measurement and a usage sample of "+id, func() bool {
		reg = c.Registration(t, id)
		return reg.GetSession().GetClock() != nil && reg.GetHostUsage() != nil
	})
	return reg
}

func synchronizationOf(c hostinfo.ClockSync) operatorv1.NodeClockSynchronization {
	switch c {
	case hostinfo.ClockSynchronized:
		return operatorv1.NodeClockSynchronization_NODE_CLOCK_SYNCHRONIZATION_SYNCHRONIZED
	case hostinfo.ClockUnsynchronized:
		return operatorv1.NodeClockSynchronization_NODE_CLOCK_SYNCHRONIZATION_UNSYNCHRONIZED
	}
	return operatorv1.NodeClockSynchronization_NODE_CLOCK_SYNCHRONIZATION_UNSPECIFIED
}

// The clock of a node running an hour ahead, and of one an hour behind, as
// ctrl measures it: offset is the node's clock minus ctrl's, its error
// (known here: both run on this machine's clock) is within the
// uncertainty, measured_at and host_usage.observed_at are on ctrl's clock,
// memory_tight.since on the node's, and synchronization is what this
// host's kernel says.
func TestNodeClocksAreMeasuredAgainstCtrls(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		began := time.Now()
		skewed := func(skew time.Duration, threshold uint64) func(*node.Config) {
			return func(cfg *node.Config) {
				cfg.Now = func() time.Time { return time.Now().Add(skew) }
				cfg.MemoryTightThreshold = threshold
			}
		}
		pool := func() node.Pool { return node.Pool{Name: "default", Dir: t.TempDir(), Default: true} }
		ahead := c.StartNodeWith(t, "node-ahead", "", skewed(time.Hour, 1<<62), pool())
		c.StartNodeWith(t, "node-behind", "", skewed(-time.Hour, 0), pool())
		kernel := synchronizationOf(hostinfo.ClockState())

		for id, skew := range map[string]time.Duration{"node-ahead": time.Hour, "node-behind": -time.Hour} {
			reg := clockOf(t, c, id)
			clock := reg.GetSession().GetClock()
			offset, uncertainty := clock.GetOffset().AsDuration(), clock.GetUncertainty().AsDuration()
			if (offset > 0) != (skew > 0) {
				t.Errorf("%s, whose clock is %v off: offset %v has the wrong sign", id, skew, offset)
			}
			if diff := (offset - skew).Abs(); diff > uncertainty {
				t.Errorf("%s: offset %v is %v from the true %v, beyond its uncertainty %v", id, offset, diff, skew, uncertainty)
			}
			if !clock.GetExceedsTolerance() {
				t.Errorf("%s: an hour off reads within tolerance: %v", id, clock)
			}
			now := time.Now()
			if at := clock.GetMeasuredAt().AsTime(); at.Before(began) || at.After(now) {
				t.Errorf("%s: measured_at %v is not on ctrl's clock (between %v and %v)", id, at, began, now)
			}
			if at := reg.GetHostUsage().GetObservedAt().AsTime(); at.Before(began) || at.After(now) {
				t.Errorf("%s: host_usage.observed_at %v is not on ctrl's clock (between %v and %v)", id, at, began, now)
			}
			if got := clock.GetSynchronization(); got != kernel {
				t.Errorf("%s: synchronization %v, want %v as this host's kernel reports", id, got, kernel)
			}
		}

		tight := c.Registration(t, "node-ahead")
		since := tight.GetMemoryTight().GetSince().AsTime()
		if since.Before(began.Add(time.Hour)) || since.After(time.Now().Add(time.Hour)) {
			t.Errorf("memory_tight.since %v is not on the node's clock, an hour ahead of ctrl's", since)
		}
		// since is when the node began to judge its memory tight: later
		// observations keep it.
		version := tight.GetObservation().GetObservationVersion()
		testenv.WaitFor(t, "two more observations of node-ahead", func() bool {
			tight = c.Registration(t, "node-ahead")
			return tight.GetObservation().GetObservationVersion() >= version+2
		})
		if got := tight.GetMemoryTight().GetSince().AsTime(); !got.Equal(since) {
			t.Errorf("memory_tight.since moved from %v to %v while the memory stayed tight", since, got)
		}

		ahead.Stop(t)
		lost := c.WaitStatus(t, "node-ahead", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		if lost.GetMemoryTight() != nil || lost.GetSession().GetClock() != nil {
			t.Errorf("a tight node without a live session: memory_tight %v, clock %v; want both absent", lost.GetMemoryTight(), lost.GetSession().GetClock())
		}
	})
}

// Observations are snapshots with their own version: each advances
// observation_version and replaces host_usage and storage_pools, and none
// moves registration_version.
func TestObservationsHaveTheirOwnVersion(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		n := c.StartNode(t, "node-a", "", "")
		first := clockOf(t, c, "node-a")
		var reg *operatorv1.NodeRegistration
		testenv.WaitFor(t, "two more observations", func() bool {
			reg = c.Registration(t, "node-a")
			return reg.GetObservation().GetObservationVersion() >= first.GetObservation().GetObservationVersion()+2
		})
		if reg.GetRegistrationVersion() != first.GetRegistrationVersion() {
			t.Errorf("observations moved registration_version from %d to %d", first.GetRegistrationVersion(), reg.GetRegistrationVersion())
		}
		if !reg.GetHostUsage().GetObservedAt().AsTime().After(first.GetHostUsage().GetObservedAt().AsTime()) {
			t.Errorf("host_usage observed at %v, then %v: want the later sample", first.GetHostUsage().GetObservedAt().AsTime(), reg.GetHostUsage().GetObservedAt().AsTime())
		}

		// The pool's directory goes away and comes back: storage_pools follow
		// the observations, and the registration's version stays.
		moved := filepath.Join(t.TempDir(), "moved")
		availability := func(want bool) {
			t.Helper()
			testenv.WaitFor(t, "pool default to read available="+map[bool]string{true: "true", false: "false"}[want], func() bool {
				reg = c.Registration(t, "node-a")
				return len(reg.GetStoragePools()) == 1 && reg.GetStoragePools()[0].GetAvailable() == want
			})
			if reg.GetRegistrationVersion() != first.GetRegistrationVersion() {
				t.Errorf("an observation of the pool moved registration_version from %d to %d", first.GetRegistrationVersion(), reg.GetRegistrationVersion())
			}
		}
		if err := os.Rename(n.PoolDir, moved); err != nil {
			t.Fatal(err)
		}
		availability(false)
		if err := os.Rename(moved, n.PoolDir); err != nil {
			t.Fatal(err)
		}
		availability(true)
	})
}
