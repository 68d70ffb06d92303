package guest_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/kibotos/kibotos/internal/guest"
)

// One reaper for the whole test binary: two reapers would steal each
// other's children.
var (
	reaper  = guest.NewReaper()
	orphans sync.Map // pid → guest.Exit, of children nobody started through reaper
)

func TestMain(m *testing.M) {
	reaper.Orphan = func(e guest.Exit) { orphans.Store(e.Pid, e) }
	ctx, cancel := context.WithCancel(context.Background())
	go reaper.Run(ctx)
	code := m.Run()
	cancel()
	os.Exit(code)
}
