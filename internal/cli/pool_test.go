package cli_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The pool commands: tables by default (sizes for people), the API's
// messages with -o json (bytes), the API's refusals as errors.
func TestPoolCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	n := c.StartNode(t, "node-a", "", "")

	code, out, errOut := kibotos(t, c, "pool", "list")
	if code != 0 || !strings.Contains(out, "POOL") || !strings.Contains(out, "default") || !strings.Contains(out, "node-a") {
		t.Errorf("pool list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "set-capacity", "default", "2048")
	if code != 0 || !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "POOL CAPACITY RESERVED VOLUMES LAYERS CLEANUPS MEMBERS VERSION LOST default 2GiB 0B ") {
		t.Errorf("pool set-capacity: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "list", "-o", "json")
	pools := &operatorv1.ListStoragePoolsResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), pools) != nil || len(pools.GetPools()) != 1 || pools.GetPools()[0].GetCapacityBytes() != 2048<<20 {
		t.Errorf("pool list -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "get", "default", "-o", "json")
	got := &operatorv1.GetStoragePoolResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), got) != nil || got.GetPool().GetCapacityBytes() != 2048<<20 {
		t.Errorf("pool get -o json: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = kibotos(t, c, "pool", "set-capacity", "default", "1", "--expected-version", "1"); code == 0 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("pool set-capacity at a stale version: exit %d, %s", code, errOut)
	}
	if code, _, errOut = kibotos(t, c, "pool", "get", "nowhere"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("pool get of a pool never declared: exit %d, %s", code, errOut)
	}

	vol, err := c.Volumes.CreateVolume(context.Background(), connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "vol-1"}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.Msg.GetVolume().GetVolumeId()
	code, out, errOut = kibotos(t, c, "pool", "objects", "default")
	if code != 0 || !strings.Contains(out, "VOLUME") || !strings.Contains(out, id) || !strings.Contains(out, " 64MiB ") {
		t.Errorf("pool objects: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "objects", "--volume", id, "-o", "json")
	obj := &operatorv1.GetStoragePoolObjectResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), obj) != nil || obj.GetObject().GetStoragePool() != "default" {
		t.Errorf("pool objects --volume -o json: exit %d\n%s%s", code, out, errOut)
	}

	if code, _, errOut = kibotos(t, c, "pool", "declare-lost", "default"); code == 0 || !strings.Contains(errOut, "node-a") {
		t.Errorf("pool declare-lost with a live member: exit %d, %s", code, errOut)
	}
	n.Stop(t)
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if code, out, errOut = kibotos(t, c, "node", "isolate", "node-a"); code != 0 {
		t.Fatalf("node isolate: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "declare-lost", "default")
	if code != 0 || !strings.Contains(out, "LOST_VOLUMES") || !strings.Contains(out, "default  1") {
		t.Errorf("pool declare-lost: exit %d\n%s%s", code, out, errOut)
	}
}

// pool move-volume: a table of the settled object by default, the API's
// message with -o json, refusals as errors naming their code.
func TestPoolMoveCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "pool-a", Dir: t.TempDir(), Default: true}, node.Pool{Name: "pool-b", Dir: t.TempDir()})
	for _, p := range []string{"pool-a", "pool-b"} {
		c.EnsureCapacity(t, p, 1<<30)
	}
	vol, err := c.Volumes.CreateVolume(context.Background(), connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "vol-1"}, Spec: &ctrlv1.VolumeSpec{StoragePool: "pool-a", CapacityBytes: 64 << 20},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.Msg.GetVolume().GetVolumeId()
	testenv.WaitFor(t, "the Volume created", func() bool {
		v, err := c.Volumes.GetVolume(context.Background(), connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		return err == nil && v.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})

	if code, _, errOut := kibotos(t, c, "pool", "move-volume", id); code == 0 || !strings.Contains(errOut, "to") {
		t.Errorf("pool move-volume without --to: exit %d, %s", code, errOut)
	}
	if code, _, errOut := kibotos(t, c, "pool", "move-volume", id, "--to", "nowhere"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("pool move-volume to an unknown pool: exit %d, %s", code, errOut)
	}
	code, out, errOut := kibotos(t, c, "pool", "move-volume", id, "--to", "pool-b", "--command-id", "mv-1")
	if code != 0 || !strings.Contains(out, "VOLUME") || !strings.Contains(out, id) || !strings.Contains(out, "pool-b") {
		t.Errorf("pool move-volume: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "pool", "move-volume", id, "--to", "pool-b", "--command-id", "mv-1", "-o", "json")
	res := &operatorv1.MoveVolumeResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), res) != nil || res.GetObject().GetStoragePool() != "pool-b" {
		t.Errorf("pool move-volume -o json (the same command): exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := kibotos(t, c, "pool", "move-layer", "ws-nope", "--to", "pool-b"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("pool move-layer of an unknown Workspace: exit %d, %s", code, errOut)
	}
}
