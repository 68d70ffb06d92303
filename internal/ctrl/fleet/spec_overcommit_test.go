package fleet_test

import (
	"testing"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// wantSchedulable fails unless reg's schedulable CPU and memory are its
// host's times cpu and memory thousandths, each from source.
func wantSchedulable(t *testing.T, what string, reg *operatorv1.NodeRegistration, cpu, memory uint32, cpuFrom, memoryFrom operatorv1.OvercommitSource) {
	t.Helper()
	host, got, o := reg.GetObservation().GetResources(), reg.GetSchedulable(), reg.GetOvercommit()
	if got.GetCpuMillis() != uint32(uint64(host.GetCpuMillis())*uint64(cpu)/1000) || got.GetMemoryBytes() != host.GetMemoryBytes()*uint64(memory)/1000 {
		t.Errorf("%s: schedulable %v of host %v, want CPU × %d/1000 and memory × %d/1000", what, got, host, cpu, memory)
	}
	if o.GetCpu().GetThousandths() != cpu || o.GetCpu().GetSource() != cpuFrom || o.GetMemory().GetThousandths() != memory || o.GetMemory().GetSource() != memoryFrom {
		t.Errorf("%s: overcommit %v, want CPU %d from %v, memory %d from %v", what, o, cpu, cpuFrom, memory, memoryFrom)
	}
}

// Schedulable memory, like CPU, is the host's times the ratio in effect:
// the default, or the node's own override; an override left out of a
// SetNodeOvercommit is cleared while the other one is set.
func TestSchedulableMemoryFollowsTheRatioInEffect(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		c.StartNode(t, "node-a", "", "")
		const fromDefault, fromNode = operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT, operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE

		setDefaults(t, c, "defaults-1", 1, 3000, 4000)
		wantSchedulable(t, "at the 3x/4x defaults", c.Registration(t, "node-a"), 3000, 4000, fromDefault, fromDefault)
		wantSchedulable(t, "both overridden", setNode(t, c, "node-a", ptr(uint32(2000)), ptr(uint32(1500))), 2000, 1500, fromNode, fromNode)
		wantSchedulable(t, "memory left out", setNode(t, c, "node-a", ptr(uint32(2000)), nil), 2000, 4000, fromNode, fromDefault)
		wantSchedulable(t, "as read afterwards", c.Registration(t, "node-a"), 2000, 4000, fromNode, fromDefault)
	})
}
