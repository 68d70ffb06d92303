package storetest

import (
	"maps"
	"testing"
	"time"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// A node's report replaces its rows: an artifact still held keeps when it
// started arriving, one no longer held goes. Readiness counts every
// admitted node and, as ready, those holding the digest complete with a
// live session and a VM capability.
func testNodeArtifacts(t *testing.T, dsn string) {
	s := Open(t, dsn)
	img, other := digest('a'), digest('b')
	stale := placeableNode("node-stale")
	stale.Session.Live = false
	noVMs := placeableNode("node-novm")
	noVMs.Observation.Capabilities = []string{"storage.block_file"}
	revoked := placeableNode("node-revoked")
	revoked.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED
	putNodes(t, s, placeableNode("node-a"), placeableNode("node-b"), placeableNode("node-c"), stale, noVMs, revoked)

	t0, t1 := seen.Add(-time.Minute), seen
	set := func(node string, now time.Time, held ...store.NodeArtifact) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error { return tx.SetNodeArtifacts(node, held, now) })
	}
	set("node-a", t0, store.NodeArtifact{Digest: img, DeliveredBytes: 10, TotalBytes: 100}, store.NodeArtifact{Digest: other, Complete: true, DeliveredBytes: 5, TotalBytes: 5})
	set("node-a", t1, store.NodeArtifact{Digest: img, Complete: true, DeliveredBytes: 100, TotalBytes: 100})
	for _, id := range []string{"node-b", "node-stale", "node-novm", "node-revoked"} {
		set(id, t1, store.NodeArtifact{Digest: img, Complete: true, DeliveredBytes: 100, TotalBytes: 100})
	}
	set("node-c", t1, store.NodeArtifact{Digest: img, DeliveredBytes: 40, TotalBytes: 100})

	mustTx(t, s, func(tx *store.Tx) error {
		got, err := tx.ArtifactOnNodes(img, "node-b", "node-c")
		if err != nil {
			return err
		}
		want := map[string]store.NodeArtifact{
			"node-b": {NodeID: "node-b", Digest: img, Complete: true, DeliveredBytes: 100, TotalBytes: 100},
			"node-c": {NodeID: "node-c", Digest: img, DeliveredBytes: 40, TotalBytes: 100, StartedAt: t1},
		}
		if !maps.EqualFunc(got, want, func(a, b store.NodeArtifact) bool { return a == b }) {
			t.Errorf("rows of nodes node-b to node-c: %v, want %v", got, want)
		}
		a, err := tx.ArtifactOnNodes(img, "node-a", "node-a")
		if err != nil {
			return err
		}
		if want := (store.NodeArtifact{NodeID: "node-a", Digest: img, Complete: true, DeliveredBytes: 100, TotalBytes: 100, StartedAt: t0}); a["node-a"] != want {
			t.Errorf("node-a once complete: %v, want %v (started_at kept)", a["node-a"], want)
		}
		if gone, err := tx.ArtifactOnNodes(other, "node-a", "node-z"); err != nil || len(gone) != 0 {
			t.Errorf("an artifact node-a no longer reports: %v %v, want no row", gone, err)
		}
		ready, admitted, err := tx.ArtifactReadiness(img, seen.Add(-time.Second), []string{"provider.qemu", "provider.sim"})
		if err != nil {
			return err
		}
		if ready != 2 || admitted != 5 {
			t.Errorf("readiness %d of %d admitted, want node-a and node-b of 5", ready, admitted)
		}
		ready, admitted, err = tx.ArtifactReadiness(img, seen.Add(2*time.Minute), []string{"provider.qemu"})
		if err != nil || ready != 0 || admitted != 5 {
			t.Errorf("readiness once every session's lease passed: %d of %d %v, want 0 of 5", ready, admitted, err)
		}
		return nil
	})
}
