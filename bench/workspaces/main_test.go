package main

import (
	"testing"

	"github.com/kibotos/kibotos/internal/testenv"
)

// The benchmark at its smallest, real VMs: a warm-up Workspace, one bare
// boot and one Workspace, the report printed. It is here so that CI sees
// the benchmark stop working: once its reading of the node's log lost the
// execution's instance_id (the ids moved into the log calls' context), and
// every run failed after the warm-up for days without a test noticing.
func TestTheBenchmarkRunsOnce(t *testing.T) {
	// The host's accelerator as the tests probed it once: the warm-up
	// does not pay the probe again here.
	if err := run(1, 256, "none", testenv.Accel(t), false); err != nil {
		t.Fatal(err)
	}
}
