package catalog_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

func newCatalog(t *testing.T, st *store.Store, dir string) *catalog.Catalog {
	t.Helper()
	return newCatalogJudging(t, st, dir, fleet.DefaultConfig)
}

// newCatalogJudging is a catalog whose deliveries judge the nodes'
// records by liveness.
func newCatalogJudging(t *testing.T, st *store.Store, dir string, liveness catalog.Liveness) *catalog.Catalog {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := catalog.New(st, dir, command.NewRunner(st, "test", log), liveness, log)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func chunksOf(b []byte) catalog.Chunks {
	sent := false
	return func() ([]byte, error) {
		if sent {
			return nil, io.EOF
		}
		sent = true
		return b, nil
	}
}

func uploadSource(t *testing.T, c *catalog.Catalog, id string, content []byte) string {
	t.Helper()
	res, err := c.UploadTemplateSource(context.Background(), &operatorv1.TemplateSourceUploadHeader{
		Command: cmd(id), Digest: digestOf(content), SizeBytes: uint64(len(content)),
	}, chunksOf(content))
	if err != nil {
		t.Fatal(err)
	}
	return res.GetDigest()
}

// Uploads nothing references go 24 hours after they completed; one a
// revision references stays.
func TestSweepRemovesUnreferencedUploadsAfterADay(t *testing.T) {
	ctx := context.Background()
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			st := storetest.Open(t, b.DSN(t))
			dir := t.TempDir()
			c := newCatalog(t, st, dir)
			kept := uploadSource(t, c, "u1", tarOf(t, map[string]string{"a": "1"}))
			dropped := uploadSource(t, c, "u2", tarOf(t, map[string]string{"b": "2"}))
			if _, err := c.CreateTemplate(ctx, &operatorv1.CreateTemplateRequest{Command: cmd("t"), Template: "base"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CreateTemplateRevision(ctx, &operatorv1.CreateTemplateRevisionRequest{Command: cmd("r"), Template: "base",
				Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: kept}}}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Sweep(ctx, time.Now().Add(23*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if n := sources(t, dir); n != 2 {
				t.Fatalf("%d sources a day early, want 2", n)
			}
			if err := c.Sweep(ctx, time.Now().Add(25*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if n := sources(t, dir); n != 1 {
				t.Errorf("%d sources after a day, want the referenced one", n)
			}
			err := st.Tx(ctx, func(tx *store.Tx) error {
				if _, err := tx.UploadSize(store.UploadTemplateSource, dropped); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("the dropped upload is still recorded: %v", err)
				}
				_, err := tx.UploadSize(store.UploadTemplateSource, kept)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}

func sources(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "sources"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() {
			n++
		}
	}
	return n
}

// What `kibotos dev` registered before the catalog RPCs is adopted with
// its names, so stored Workspaces resolve as before.
func TestLegacyCatalogIsAdopted(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	art := func(c byte, size uint64) *nodev1.Artifact {
		return &nodev1.Artifact{Digest: "sha256:" + strings.Repeat(string(c), 64), SizeBytes: size}
	}
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutLegacyLaunch(&storev1.Launch{LaunchRef: "launch-old", PlatformKey: "default", Kernel: art('a', 1), Initrd: art('b', 2),
			KernelVersion: "6.1.0-48-amd64", CreatedAt: timestamppb.Now()}, true, true); err != nil {
			return err
		}
		return tx.PutLegacyTemplateRevision(&storev1.TemplateRevision{Template: "busybox", Revision: "r-old", Root: art('c', 3), CreatedAt: timestamppb.Now()}, true, true)
	}); err != nil {
		t.Fatal(err)
	}
	c := newCatalog(t, st, t.TempDir())
	k, err := c.GetPlatformKey(ctx, &operatorv1.GetPlatformKeyRequest{PlatformKey: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.GetPlatformKey(); got.GetDefaultLaunchRef() != "launch-old" || !got.GetDeploymentDefault() || got.GetLaunchCount() != 1 {
		t.Errorf("adopted key %v", got)
	}
	r, err := c.GetTemplateRevision(ctx, &operatorv1.GetTemplateRevisionRequest{Selector: &ctrlv1.TemplateSelector{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetRevision(); got.GetRef().GetRevision() != "r-old" || !got.GetIsDefault() || got.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		t.Errorf("adopted revision %v", got)
	}
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		l, err := tx.DefaultLaunch("")
		if err != nil || l.GetKernel().GetDigest() != art('a', 1).GetDigest() || l.GetInitrd().GetSizeBytes() != 2 {
			t.Errorf("the deployment default Launch as nodes boot it: %v %v", l, err)
		}
		lc, err := tx.ReadLegacyCatalog()
		if err == nil && len(lc.Launches)+len(lc.Templates) != 0 {
			t.Errorf("legacy rows left: %+v", lc)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A second start adopts nothing twice.
	newCatalog(t, st, t.TempDir())
}

// Deleting: a BUILDING revision is cancelled; a revision or Template a
// Workspace holds, or the deployment default, stays; a deleted Template is
// a tombstone whose name is never reused.
func TestDeleteRules(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	c := newCatalog(t, st, t.TempDir())
	src := uploadSource(t, c, "u", tarOf(t, map[string]string{"a": "1"}))
	tar := &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: src}}}
	for i, name := range []string{"first", "second"} {
		if _, err := c.CreateTemplate(ctx, &operatorv1.CreateTemplateRequest{Command: cmd("t-" + name), Template: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateTemplateRevision(ctx, &operatorv1.CreateTemplateRevisionRequest{Command: cmd("r-" + name), Template: name, Revision: "v" + string(rune('1'+i)), Source: tar}); err != nil {
			t.Fatal(err)
		}
	}
	// No runner runs here: both revisions stay BUILDING.
	del, err := c.DeleteTemplateRevision(ctx, &operatorv1.DeleteTemplateRevisionRequest{Command: cmd("d1"), Ref: &ctrlv1.TemplateRef{Template: "second", Revision: "v2"}})
	if err != nil || del.GetRevision().GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED || !strings.Contains(del.GetRevision().GetFailure(), "cancelled") {
		t.Fatalf("delete a BUILDING revision: %v %v", del, err)
	}
	if again, err := c.DeleteTemplateRevision(ctx, &operatorv1.DeleteTemplateRevisionRequest{Command: cmd("d1b"), Ref: &ctrlv1.TemplateRef{Template: "second", Revision: "v2"}}); err != nil || again.GetRevision().GetDeletedAt() == nil {
		t.Errorf("delete a deleted revision: %v %v", again, err)
	}
	if _, err := c.CreateTemplateRevision(ctx, &operatorv1.CreateTemplateRevisionRequest{Command: cmd("r-again"), Template: "second", Revision: "v2", Source: tar}); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("reuse of a deleted revision's name: %v", err)
	}

	// A Workspace holds first/v1.
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-holder", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED,
			Spec: &ctrlv1.WorkspaceSpec{Template: &ctrlv1.TemplateRef{Template: "first", Revision: "v1"}}})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteTemplateRevision(ctx, &operatorv1.DeleteTemplateRevisionRequest{Command: cmd("d2"), Ref: &ctrlv1.TemplateRef{Template: "first", Revision: "v1"}}); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "ws-holder") {
		t.Errorf("delete a revision a Workspace holds: %v", err)
	}
	if _, err := c.DeleteTemplate(ctx, &operatorv1.DeleteTemplateRequest{Command: cmd("d3"), Template: "first"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("delete the deployment default Template: %v", err)
	}
	gone, err := c.DeleteTemplate(ctx, &operatorv1.DeleteTemplateRequest{Command: cmd("d4"), Template: "second", ExpectedVersion: 1})
	if err != nil || gone.GetTemplate().GetDeletedAt() == nil || gone.GetTemplate().GetVersion() != 2 {
		t.Fatalf("delete a Template: %v %v", gone, err)
	}
	if _, err := c.CreateTemplate(ctx, &operatorv1.CreateTemplateRequest{Command: cmd("t-reuse"), Template: "second"}); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("reuse of a deleted Template's name: %v", err)
	}
	if got, err := c.GetTemplate(ctx, &operatorv1.GetTemplateRequest{Template: "second"}); err != nil || got.GetTemplate().GetDeletedAt() == nil {
		t.Errorf("GetTemplate of a deleted Template: %v %v", got, err)
	}
	list, err := c.ListTemplates(ctx, &operatorv1.ListTemplatesRequest{})
	if err != nil || len(list.GetTemplates()) != 1 {
		t.Errorf("ListTemplates without deleted: %v %v", list, err)
	}
	if list, err = c.ListTemplates(ctx, &operatorv1.ListTemplatesRequest{IncludeDeleted: true}); err != nil || len(list.GetTemplates()) != 2 {
		t.Errorf("ListTemplates with deleted: %v %v", list, err)
	}
	if _, err := c.CreateTemplateRevision(ctx, &operatorv1.CreateTemplateRevisionRequest{Command: cmd("r-gone"), Template: "second", Source: tar}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a revision of a deleted Template: %v", err)
	}
}
