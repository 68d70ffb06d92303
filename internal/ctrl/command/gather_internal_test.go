package command

import (
	"errors"
	"testing"
)

// A batch whose work failed before it sealed the batch (a transaction
// that could not begin) still tells every member that joined it, those
// that joined while it ran included: none waits for ever.
func TestGathererTellsMembersThatJoinedWhileTheBatchRan(t *testing.T) {
	g := &gatherer[string]{max: 8}
	boom := errors.New("could not begin")
	told := map[string]error{}
	g.run("first", func(b *batch[string]) error {
		if g.join("late") != nil {
			t.Fatal("a member joining the batch forming began another")
		}
		return boom // without sealing b
	}, func(x string, err error) { told[x] = err })
	for _, x := range []string{"first", "late"} {
		if err, ok := told[x]; !ok || !errors.Is(err, boom) {
			t.Errorf("member %q told %v (told: %v), want %v", x, err, ok, boom)
		}
	}
	if b := g.join("next"); b == nil {
		t.Error("after the batch ran, a member joined it again, want a new batch")
	}
}
