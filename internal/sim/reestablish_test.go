package sim_test

import (
	"slices"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Workspace.reestablish is empty after a Workspace's first start, and
// after a later start names everything that ended with the execution
// before it: data-plane sessions, credentials, processes, login state.
func TestAStartAfterAnEarlierExecutionSaysWhatToSetUpAgain(t *testing.T) {
	c, _ := oneNode(t, nil)
	id := createWithoutVolume(t, c, "create")
	if w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); w.GetGeneration() != 1 || len(w.GetReestablish()) != 0 {
		t.Errorf("after the first start: generation %d, reestablish %v; want 1, nothing", w.GetGeneration(), w.GetReestablish())
	}
	w := restart(t, c, id, "")
	want := []ctrlv1.ReestablishRequirement{
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_DATA_PLANE_SESSION, ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_CREDENTIAL,
		ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_PROCESS, ctrlv1.ReestablishRequirement_REESTABLISH_REQUIREMENT_LOGIN_STATE,
	}
	if w.GetGeneration() != 2 || !slices.Equal(w.GetReestablish(), want) {
		t.Errorf("after the second start: generation %d, reestablish %v; want 2, %v", w.GetGeneration(), w.GetReestablish(), want)
	}
}
