package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

// Names of what `kibotos dev` registers.
const (
	defaultPlatformKey = "default"
	defaultTemplate    = "busybox"
)

// guestBinary finds kibotos-guest: $KIBOTOS_GUEST, else next to this
// executable (scripts/dev.sh builds both into bin/).
func guestBinary() (string, error) {
	if p := os.Getenv("KIBOTOS_GUEST"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "kibotos-guest")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kibotos-guest is not next to %s: build it with `CGO_ENABLED=0 go build -o %s ./cmd/kibotos-guest` (scripts/dev.sh does) or set KIBOTOS_GUEST", self, p)
	}
	return p, nil
}

// progressPrinter shows a long step's progress, at most a few lines a
// second.
func progressPrinter(w io.Writer, what string) platform.Progress {
	var last time.Time
	return func(step string, done, total int64) {
		if time.Since(last) < 300*time.Millisecond && done != total {
			return
		}
		last = time.Now()
		if total > 0 {
			fmt.Fprintf(w, "%s: %s %d%% (%d/%d)\n", what, step, done*100/total, done, total)
		} else {
			fmt.Fprintf(w, "%s: %s %d\n", what, step, done)
		}
	}
}

// ensureDefaults builds and registers a default platform (Debian's kernel,
// an initramfs with kibotos-guest) and a default template (a busybox root)
// when the catalog has none: the first start of `kibotos dev`.
func ensureDefaults(ctx context.Context, cat *catalog.Catalog, stateDir string, out io.Writer) error {
	ok, err := cat.HasDefaults(ctx)
	if err != nil || ok {
		return err
	}
	fmt.Fprintln(out, "first start: building the default platform and template (once)")
	guest, err := guestBinary()
	if err != nil {
		return err
	}
	work := filepath.Join(stateDir, "build")
	defer os.RemoveAll(work)
	cache := os.Getenv("KIBOTOS_CACHE")
	if cache == "" {
		cache = filepath.Join(stateDir, "cache")
	}
	deb, err := platform.DownloadDebianKernel(ctx, cache, progressPrinter(out, "kernel package"))
	if err != nil {
		return err
	}
	platformDir := filepath.Join(work, "platform")
	if err := os.MkdirAll(platformDir, 0o755); err != nil {
		return err
	}
	m, err := platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest, Progress: progressPrinter(out, "platform")}, platformDir)
	if err != nil {
		return err
	}
	if _, err := cat.RegisterPlatform(ctx, defaultPlatformKey, m, platformDir, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "platform %q: kernel %s, %s\n", defaultPlatformKey, m.KernelVersion, m.Digest)
	root := filepath.Join(work, "root")
	if err := template.BusyboxDir(busyboxPath(), root); err != nil {
		return fmt.Errorf("default template: %w (Debian package busybox-static)", err)
	}
	img, err := template.FromDir(ctx, root, filepath.Join(work, "root.img"))
	if err != nil {
		return err
	}
	rev, err := cat.RegisterTemplate(ctx, defaultTemplate, img, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "template %q revision %s: %s\n", defaultTemplate, rev.GetRef().GetRevision(), img.Digest)
	return nil
}

func busyboxPath() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "busybox"
}
