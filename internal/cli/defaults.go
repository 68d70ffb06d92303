package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl"
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

// progressPrinter shows a long step's progress on the shared display.
func progressPrinter(w io.Writer, what string) platform.Progress {
	p := newProgress(w)
	return func(step string, done, total int64) {
		p.bytes(what+": "+step, done, total)
		if total > 0 && done == total {
			p.end()
		}
	}
}

// ensureDefaults builds and registers a default platform (Debian's kernel,
// an initramfs with kibotos-guest) and a default template (a busybox root)
// when the catalog has none: the first start of `kibotos dev`. It goes the
// way `kibotos platform build` and `kibotos template build` go, through
// ctrl's Operator endpoint (as written to its endpoints.env), so there is
// one path into the catalog.
func ensureDefaults(ctx context.Context, cat *catalog.Catalog, stateDir string, out io.Writer) error {
	ok, err := cat.HasDefaults(ctx)
	if err != nil || ok {
		return err
	}
	fmt.Fprintln(out, "first start: building the default platform and template (once)")
	env, err := clientconfig.ReadEnvFile(ctrl.EndpointsFile(stateDir))
	if err != nil {
		return err
	}
	op := connect.WithInterceptors(bearer(env[clientconfig.EnvOperatorToken]))
	endpoint := env[clientconfig.EnvOperatorEndpoint]
	platforms := operatorv1connect.NewPlatformCatalogServiceClient(uploadHTTP, endpoint, op)
	templates := operatorv1connect.NewTemplateCatalogServiceClient(uploadHTTP, endpoint, op)
	cache := os.Getenv("KIBOTOS_CACHE")
	if cache == "" {
		cache = filepath.Join(stateDir, "cache")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	if err := ensureDefaultPlatform(ctx, platforms, cache, out); err != nil {
		return err
	}
	return ensureDefaultTemplate(ctx, templates, stateDir, out)
}

func ensureDefaultPlatform(ctx context.Context, client operatorv1connect.PlatformCatalogServiceClient, cache string, out io.Writer) error {
	k, err := client.GetPlatformKey(ctx, connect.NewRequest(&operatorv1.GetPlatformKeyRequest{PlatformKey: defaultPlatformKey}))
	if err == nil && k.Msg.GetPlatformKey().GetDefaultLaunchRef() != "" {
		return nil
	}
	b := platformBuild{key: defaultPlatformKey, cache: cache, setDefault: true}
	l, err := b.run(ctx, client, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "platform %q: %s (%s)\n", defaultPlatformKey, l.GetLaunchRef(), l.GetDescription())
	return nil
}

func ensureDefaultTemplate(ctx context.Context, client operatorv1connect.TemplateCatalogServiceClient, stateDir string, out io.Writer) error {
	r, err := client.GetTemplateRevision(ctx, connect.NewRequest(&operatorv1.GetTemplateRevisionRequest{Selector: &ctrlv1.TemplateSelector{Template: defaultTemplate}}))
	if err == nil && r.Msg.GetRevision().GetState() == operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		return nil
	}
	work := filepath.Join(stateDir, "build")
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := template.BusyboxDir(busyboxPath(), root); err != nil {
		return fmt.Errorf("default template: %w (Debian package busybox-static)", err)
	}
	b := templateBuild{template: defaultTemplate, from: root, setDefault: true, description: "busybox"}
	rev, err := b.run(ctx, client, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "template %q revision %s: %s\n", defaultTemplate, rev.GetRef().GetRevision(), rev.GetImageDigest())
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
