package fleet_test

import (
	"net/http"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// eachDatabase runs fn as a subtest on SQLite and on PostgreSQL: db puts
// ctrl's store on a fresh database of each kind.
func eachDatabase(t *testing.T, fn func(t *testing.T, db testenv.Option)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, testenv.OnDatabase(b.DSN(t))) })
	}
}

// httpClient speaks cleartext HTTP/2, as node sessions need.
func httpClient() *http.Client {
	t := &http.Transport{}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// newVMEnv starts ctrl with the fleet's fast timings and a catalog real
// microVMs boot from; it starts no node.
func newVMEnv(t *testing.T) *vmEnv {
	t.Helper()
	c := testenv.New(t, fastFleet())
	c.BootableCatalog(t)
	return &vmEnv{lifecycleEnv: &lifecycleEnv{c}, t: t}
}

// startNode starts node agent id with pool "default" (in poolDir, or a
// directory of its own) and powers its VMs off when the test ends: a VM
// outlives its agent.
func (e *vmEnv) startNode(id, poolDir string) *testenv.Node {
	e.t.Helper()
	n := e.c.StartNode(e.t, id, "", poolDir)
	e.t.Cleanup(n.PowerOff)
	return n
}

// createRequest is the create most VM tests make: one CPU, 256 MiB of
// memory and of writable layer, a NEW 64 MiB Volume on /data.
func createRequest(commandID string) *ctrlv1.CreateWorkspaceRequest {
	return &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume: &ctrlv1.WorkspaceVolumeBinding{
				Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: "/data",
				NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
			},
		},
	}
}
