package workspace

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/testenv/reqfuzz"
)

// FuzzWorkspaceRequestsJSON: any bytes a JSON client sends, decoded as a
// CreateWorkspaceRequest and as an UpdateWorkspaceNetworkPolicyRequest, go
// through the checks the handlers make before they touch the database
// (validateCreate, validatePolicyUpdate and the command_id check) without
// a panic, with the same decision each time, refusals invalid_argument;
// an accepted request is accepted again, with the same binding and policy
// to store, after a protojson and a binary round trip (reqfuzz.Check).
func FuzzWorkspaceRequestsJSON(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"template":{"template":"busybox","revision":"r1"},` +
			`"resources":{"cpuMillis":1000,"memoryBytes":"268435456","writableLayerCapacityBytes":"1073741824"},` +
			`"volume":{"mode":"WORKSPACE_VOLUME_MODE_NEW","mountPath":"/srv/data","newVolume":{"storagePool":"fast","capacityBytes":"1048576"}},` +
			`"capabilities":{"required":["accel.kvm"]},"platformKey":"default",` +
			`"networkPolicy":{"mode":"NETWORK_POLICY_MODE_PUBLIC_INTERNET","allow":["10.0.0.0/8"],"deny":["::/0"],` +
			`"egresses":[{"egressId":"egr-1","destinations":["203.0.113.0/24"]}],"resolvers":[{"resolverId":"rsv-1","path":{"egressId":"egr-1"}}]},` +
			`"expiration":{"action":"WORKSPACE_EXPIRATION_ACTION_STOP","deadline":"2030-01-01T00:00:00Z"},` +
			`"labels":{"app.kubernetes.io/name":"web"},"annotations":{"note":"é"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"template":{"template":"a b","revision":"x/y"},"resources":{"memoryBytes":"134217728"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"volume":{"mode":"WORKSPACE_VOLUME_MODE_BOUND","volumeId":"vol-1","mountPath":"/tmp/x"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"volume":{"mode":"WORKSPACE_VOLUME_MODE_NONE","deleteWithWorkspace":false}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"volume":{"mountPath":"/data/../etc"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"volume":{"mode":7}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217729"},"capabilities":{"required":["gpu"]}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"expiration":{"action":1,"deadline":"1999-01-01T00:00:00Z"}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"networkPolicy":{"mode":"NETWORK_POLICY_MODE_DENY_ALL","allow":["1.2.3.4"]}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"networkPolicy":{"mode":2,"resolvers":[{"resolverId":"r","path":{"direct":{}}}]}}}`,
		`{"command":{"commandId":"c1"},"spec":{"resources":{"memoryBytes":"134217728"},"labels":{"-bad":"x"},"annotations":{"a":"\u0000"}}}`,
		`{"command":{"commandId":"c1"},"workspaceId":"ws-1","expectedRevision":"3","drainSeconds":60,` +
			`"networkPolicy":{"mode":"NETWORK_POLICY_MODE_PUBLIC_INTERNET","allow":["1.2.3.4"],"revision":"9"}}`,
		`{"command":{"commandId":"c1"},"drainSeconds":3601,"networkPolicy":{"mode":"NETWORK_POLICY_MODE_PUBLIC_INTERNET","allow":["1.2.3.4/8"]}}`,
		`{"command":{"commandId":""},"networkPolicy":{"mode":"NETWORK_POLICY_MODE_UNSPECIFIED"}}`,
	} {
		f.Add([]byte(s))
	}
	vols := volume.New(nil, nil, command.NewRunner(nil, "fuzz", nil), volume.DefaultProfile)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &Service{volumes: vols, now: func() time.Time { return now }}
	f.Fuzz(func(t *testing.T, data []byte) {
		reqfuzz.Check(t, data, func(req *ctrlv1.CreateWorkspaceRequest) ([]proto.Message, error) {
			binding, policy, err := s.validateCreate(req, now)
			return []proto.Message{binding, policy}, err
		})
		reqfuzz.Check(t, data, func(req *ctrlv1.UpdateWorkspaceNetworkPolicyRequest) ([]proto.Message, error) {
			if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
				return nil, err
			}
			policy, err := validatePolicyUpdate(req)
			return []proto.Message{policy}, err
		})
	})
}
