package workspace

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// WaitWorkspaceRequest.timeout: "absent or zero is 30 s"; any other value
// up to 60 s is the wait's bound as given.
func TestWaitTimeoutDefaultsTo30Seconds(t *testing.T) {
	states := []ctrlv1.WorkspaceState{ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE}
	for _, tc := range []struct {
		timeout *durationpb.Duration
		want    time.Duration
	}{
		{nil, 30 * time.Second},
		{durationpb.New(0), 30 * time.Second},
		{durationpb.New(time.Millisecond), time.Millisecond},
		{durationpb.New(time.Minute), time.Minute},
	} {
		got, err := waitTimeout(&ctrlv1.WaitWorkspaceRequest{States: states, Timeout: tc.timeout})
		if err != nil || got != tc.want {
			t.Errorf("timeout %v: %v, %v; want %v", tc.timeout, got, err, tc.want)
		}
	}
}
