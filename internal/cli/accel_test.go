package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/cli"
)

// An --accel (or KIBOTOS_ACCEL) that is no accelerator stops `kibotos node`
// and `kibotos dev` before they start anything, naming the flag.
func TestAnUnknownAcceleratorIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"node", "--accel", "hvf", "--node-id", "n", "--state-dir", t.TempDir()},
		{"dev", "--accel", "hvf", "--state-dir", t.TempDir()},
	} {
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), args, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), `--accel: accelerator "hvf"`) {
			t.Errorf("kibotos %v: exit %d, %q; want a failure naming --accel", args, code, stderr.String())
		}
	}
	t.Setenv("KIBOTOS_ACCEL", "hvf")
	var stdout, stderr strings.Builder
	if code := cli.Main(context.Background(), []string{"node", "--node-id", "n", "--state-dir", t.TempDir()}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "--accel") {
		t.Errorf("kibotos node with KIBOTOS_ACCEL=hvf: exit %d, %q; want a failure naming --accel", code, stderr.String())
	}
}
