package platform_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/platform"
)

func TestBuildRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	notDeb := filepath.Join(dir, "kernel.deb")
	guest := filepath.Join(dir, "guest")
	for _, f := range []string{notDeb, guest} {
		if err := os.WriteFile(f, []byte("hello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		in   platform.BuildInput
		want string
	}{
		{platform.BuildInput{KernelDeb: notDeb}, "required"},
		{platform.BuildInput{KernelDeb: notDeb, GuestBinary: filepath.Join(dir, "nosuch")}, "guest binary"},
		{platform.BuildInput{KernelDeb: notDeb, GuestBinary: dir}, "not a regular file"},
		{platform.BuildInput{KernelDeb: notDeb, GuestBinary: guest}, "not a .deb"},
	} {
		_, err := platform.Build(context.Background(), tc.in, out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v): got %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// A failed build leaves neither a manifest nor its work directory.
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output dir after failed builds holds %v", ents)
	}
}
