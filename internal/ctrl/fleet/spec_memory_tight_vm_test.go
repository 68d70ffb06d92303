package fleet_test

import (
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A node whose host memory turns tight under a running Workspace (here:
// its agent restarts with a threshold above any host's memory) reads
// memory_tight and takes no new Workspace, and what already runs there
// is not affected: the Workspace stays AVAILABLE and runs processes.
func TestMemoryTightLeavesWhatRunsAlone(t *testing.T) {
	e := newVMEnv(t)
	c := e.c
	a := e.startNode("node-a", "")
	w := e.createOnNodeA("create-1", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE})

	a.Stop(t) // the VM keeps running; the agent re-attaches it
	c.StartNodeWith(t, "node-a", a.StateDir, func(cfg *node.Config) { cfg.MemoryTightThreshold = 1 << 62 },
		node.Pool{Name: "default", Dir: a.PoolDir, Default: true})
	reg := c.Registration(t, "node-a")
	testenv.WaitFor(t, "node-a to read memory_tight", func() bool {
		reg = c.Registration(t, "node-a")
		return reg.GetMemoryTight() != nil
	})
	testenv.WaitFor(t, "two more observations of the tight node", func() bool {
		return c.Registration(t, "node-a").GetObservation().GetObservationVersion() >= reg.GetObservation().GetObservationVersion()+2
	})

	if got := e.workspace(w.GetWorkspaceId()); got.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("the Workspace on the tight node: %v (failure %v), want AVAILABLE", got.GetState(), got.GetFailure())
	}
	// unavailable (retryable) until the restarted agent reached the
	// guest's channel, which under TCG on a loaded host can take a while
	var out string
	var code int32
	waitLong(t, "a process in the Workspace on the tight node", func() bool {
		var err error
		out, code, err = c.TryExec(w.GetWorkspaceId(), "echo", "still here")
		return err == nil
	})
	if code != 0 || out != "still here\n" {
		t.Errorf("a process in the Workspace on the tight node: %q, exit %d", out, code)
	}
	if row := placementOf(t, c, w.GetWorkspaceId()); row.GetNodeId() != "node-a" {
		t.Errorf("the Workspace's placement on the tight node: %v, want it kept on node-a", row)
	}
}
