package store

import (
	"testing"
	"time"
)

// A mirror older than its maximum age is read again in the background once
// a placement used it since its last read, one reload at a time; what
// commits while the reload reads is applied again over what it read, and
// a failed reload leaves the mirror as it was. White-box: the reload's two
// halves are called in turn, with a commit between them, so no timing
// decides the order.
func TestMirrorReloadedInTheBackgroundKeepsCommitsMadeMeanwhile(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	row := func(id string, cpu uint64) *NodePlacement {
		return &NodePlacement{NodeID: id, Allocated: Resources{CPUMillis: cpu}}
	}
	ix := &placeIndex{maxAge: time.Minute, rows: map[string]*NodePlacement{"a": row("a", 0)}, ids: []string{"a"},
		stale: map[string]bool{}, loadedAt: t0}

	if ix.reloadDue(t0.Add(2 * time.Minute)) {
		t.Fatal("a reload is due for a mirror no placement used since it was read")
	}
	ix.usedAt = t0.Add(time.Second)
	if ix.reloadDue(t0.Add(30 * time.Second)) {
		t.Fatal("a reload is due for a mirror younger than its maximum age")
	}
	if !ix.reloadDue(t0.Add(2 * time.Minute)) {
		t.Fatal("no reload is due for a used mirror older than its maximum age")
	}
	if ix.reloadDue(t0.Add(2 * time.Minute)) {
		t.Fatal("a second reload is due while one reads")
	}

	// A charge of node a commits while the reload reads a table that has
	// not seen it yet, and node b registered.
	ix.committed([]placementPatch{func(ix *placeIndex) {
		p := *ix.rows["a"]
		p.Allocated.CPUMillis = 500
		ix.set(&p)
	}})
	read := map[string]*NodePlacement{"a": row("a", 0), "b": row("b", 0)}
	ix.reloaded(read, []string{"a", "b"}, t0.Add(2*time.Minute))
	if got := ix.rows["a"].Allocated.CPUMillis; got != 500 {
		t.Errorf("node a's charge after the reload: %d, want the 500 committed while it read", got)
	}
	if ix.rows["b"] == nil || len(ix.ids) != 2 {
		t.Errorf("the reload's new node is not in the mirror: %v", ix.ids)
	}
	if !ix.loadedAt.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("loaded at %v, want when the reload began", ix.loadedAt)
	}
	if ix.reloadDue(t0.Add(4 * time.Minute)) {
		t.Error("a reload is due for a mirror no placement used since the last one")
	}

	// A failed reload changes nothing, and the next one may begin.
	ix.usedAt = t0.Add(3 * time.Minute)
	if !ix.reloadDue(t0.Add(4 * time.Minute)) {
		t.Fatal("no reload is due after a placement used the mirror")
	}
	ix.reloaded(nil, nil, t0.Add(4*time.Minute))
	if ix.rows["a"].Allocated.CPUMillis != 500 || !ix.loadedAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("a failed reload changed the mirror: %+v, loaded at %v", ix.rows["a"], ix.loadedAt)
	}
	if !ix.reloadDue(t0.Add(4 * time.Minute)) {
		t.Error("no reload is due after one failed")
	}
}
