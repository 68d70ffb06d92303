package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

func launch(key string, rev uint64) *operatorv1.Launch {
	return &operatorv1.Launch{
		LaunchRef: fmt.Sprintf("%s-%d", key, rev), PlatformKey: key, Revision: rev,
		Spec: &operatorv1.LaunchSpec{
			Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Architecture: "amd64",
			Kernel:    &operatorv1.PlatformArtifact{Digest: digest('a'), SizeBytes: 10},
			Initramfs: &operatorv1.PlatformArtifact{Digest: digest('b'), SizeBytes: 20},
		},
	}
}

func testCatalogPlatformKeysAndLaunches(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, k := range []string{"b", "a", "c"} {
			if err := tx.PutPlatformKey(&operatorv1.PlatformKey{PlatformKey: k, Version: 1}); err != nil {
				return err
			}
		}
		if err := tx.SetDeploymentDefaultPlatformKey("a"); err != nil {
			return err
		}
		if err := tx.SetDeploymentDefaultPlatformKey("b"); err != nil {
			return err
		}
		keys, err := tx.ListPlatformKeys("a", 10)
		if err != nil {
			return err
		}
		if len(keys) != 2 || keys[0].GetPlatformKey() != "b" || !keys[0].GetDeploymentDefault() || keys[1].GetDeploymentDefault() {
			t.Errorf("keys after a: %v", keys)
		}
		if a, err := tx.GetPlatformKey("a", true); err != nil || a.GetDeploymentDefault() {
			t.Errorf("a = %v, %v; want no longer the deployment default", a, err)
		}
		if _, err := tx.DefaultLaunch(""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("default launch of a key without one: %v", err)
		}
		for rev := uint64(1); rev <= 3; rev++ {
			if err := tx.InsertLaunch(launch("b", rev)); err != nil {
				return err
			}
		}
		if err := tx.PutPlatformKey(&operatorv1.PlatformKey{PlatformKey: "b", DefaultLaunchRef: "b-2", Version: 2}); err != nil {
			return err
		}
		l, err := tx.DefaultLaunch("")
		if err != nil {
			return err
		}
		if l.GetLaunchRef() != "b-2" || l.GetKernel().GetDigest() != digest('a') || l.GetInitrd().GetSizeBytes() != 20 || l.GetKernel().GetName() != store.ArtifactKernel {
			t.Errorf("default launch as nodes boot it: %v", l)
		}
		page, err := tx.ListLaunches("b", 3, 10)
		if err != nil {
			return err
		}
		if len(page) != 2 || page[0].GetRevision() != 2 || page[1].GetRevision() != 1 {
			t.Errorf("launches below 3, newest first: %v", page)
		}
		return nil
	})
	// A revision is unique within its key.
	if err := s.Tx(ctx, func(tx *store.Tx) error {
		l := launch("b", 1)
		l.LaunchRef = "other"
		return tx.InsertLaunch(l)
	}); err == nil {
		t.Error("a second Launch with revision 1 of key b was stored")
	}
}

func revision(template, rev string, state operatorv1.TemplateRevisionState) *operatorv1.TemplateRevision {
	return &operatorv1.TemplateRevision{
		Ref: &ctrlv1.TemplateRef{Template: template, Revision: rev}, State: state,
		Source:      &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: digest('s')}}},
		ImageDigest: digest('i'), ImageSizeBytes: 1 << 20,
	}
}

func testCatalogTemplatesAndRevisions(t *testing.T, dsn string) {
	s := Open(t, dsn)
	ready := operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutTemplate(&operatorv1.Template{Template: "gone", DeletedAt: timestamppb.Now()}); err != nil {
			return err
		}
		if err := tx.PutTemplate(&operatorv1.Template{Template: "base", DefaultRevision: "2"}); err != nil {
			return err
		}
		if err := tx.SetDeploymentDefaultTemplate("base"); err != nil {
			return err
		}
		for i, st := range []operatorv1.TemplateRevisionState{ready, ready, operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING, operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED} {
			if err := tx.InsertTemplateRevision(revision("base", fmt.Sprint(i+1), st)); err != nil {
				return err
			}
		}
		list, err := tx.ListTemplates("", 10, false)
		if err != nil {
			return err
		}
		if len(list) != 1 || list[0].GetTemplate() != "base" || !list[0].GetDeploymentDefault() {
			t.Errorf("templates without deleted: %v", list)
		}
		if list, err = tx.ListTemplates("", 10, true); err != nil || len(list) != 2 {
			t.Errorf("templates with deleted: %v %v", list, err)
		}
		got, err := tx.TemplateRevision("", "")
		if err != nil {
			return err
		}
		if got.GetRevision() != "2" || got.GetRoot().GetDigest() != digest('i') {
			t.Errorf("deployment default revision as nodes receive it: %v", got)
		}
		if _, err := tx.TemplateRevision("base", "3"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a BUILDING revision is selectable: %v", err)
		}
		if _, err := tx.SelectTemplateRevision("gone", "1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a deleted template is selectable: %v", err)
		}
		revs, keys, err := tx.ListTemplateRevisions("base", "", 2, false)
		if err != nil {
			return err
		}
		if len(revs) != 2 || revs[0].GetRef().GetRevision() != "3" || revs[1].GetRef().GetRevision() != "2" {
			t.Errorf("first page newest first without deleted: %v", revs)
		}
		revs, _, err = tx.ListTemplateRevisions("base", keys[1], 10, true)
		if err != nil || len(revs) != 1 || revs[0].GetRef().GetRevision() != "1" {
			t.Errorf("after %s: %v %v", keys[1], revs, err)
		}
		r := revision("base", "3", ready)
		if err := tx.UpdateTemplateRevision(r); err != nil {
			return err
		}
		if _, err := tx.TemplateRevision("base", "3"); err != nil {
			t.Errorf("after READY: %v", err)
		}
		if err := tx.UpdateTemplateRevision(revision("base", "9", ready)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("update of a missing revision: %v", err)
		}
		return nil
	})
}

func testCatalogUploadsUnreferenced(t *testing.T, dsn string) {
	s := Open(t, dsn)
	old := time.Now().Add(-25 * time.Hour)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, u := range []struct {
			kind string
			c    byte
			at   time.Time
		}{
			{store.UploadPlatformArtifact, 'a', old}, {store.UploadPlatformArtifact, 'c', old}, {store.UploadPlatformArtifact, 'd', time.Now()},
			{store.UploadTemplateSource, 's', old}, {store.UploadTemplateSource, 't', old},
		} {
			if ok, err := tx.PutUpload(u.kind, digest(u.c), 5, u.at); err != nil || !ok {
				return fmt.Errorf("upload %c: %v %v", u.c, ok, err)
			}
		}
		if ok, err := tx.PutUpload(store.UploadPlatformArtifact, digest('a'), 5, time.Now()); err != nil || ok {
			t.Errorf("second upload of the same content: inserted %v, %v", ok, err)
		}
		if size, err := tx.UploadSize(store.UploadTemplateSource, digest('s')); err != nil || size != 5 {
			t.Errorf("UploadSize = %d, %v", size, err)
		}
		if _, err := tx.UploadSize(store.UploadTemplateSource, digest('a')); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a platform upload is a template source: %v", err)
		}
		if err := tx.InsertLaunch(launch("k", 1)); err != nil { // references a and b
			return err
		}
		if err := tx.PutTemplate(&operatorv1.Template{Template: "base"}); err != nil {
			return err
		}
		if err := tx.InsertTemplateRevision(revision("base", "1", operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_FAILED)); err != nil { // references s
			return err
		}
		cutoff := time.Now().Add(-24 * time.Hour)
		if got, err := tx.UnreferencedUploads(store.UploadPlatformArtifact, cutoff); err != nil || fmt.Sprint(got) != fmt.Sprint([]string{digest('c')}) {
			t.Errorf("unreferenced platform artifacts: %v %v", got, err)
		}
		if got, err := tx.UnreferencedUploads(store.UploadTemplateSource, cutoff); err != nil || fmt.Sprint(got) != fmt.Sprint([]string{digest('t')}) {
			t.Errorf("unreferenced template sources: %v %v", got, err)
		}
		if err := tx.DeleteUpload(store.UploadTemplateSource, digest('t')); err != nil {
			return err
		}
		_, err := tx.UploadSize(store.UploadTemplateSource, digest('t'))
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after DeleteUpload: %v", err)
		}
		return nil
	})
}

func testLegacyCatalogReadAndCleared(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		l := &storev1.Launch{LaunchRef: "launch-1", PlatformKey: "default", Kernel: &nodev1.Artifact{Digest: digest('a')}, CreatedAt: timestamppb.Now()}
		if err := tx.PutLegacyLaunch(l, true, true); err != nil {
			return err
		}
		r := &storev1.TemplateRevision{Template: "busybox", Revision: "r-1", Root: &nodev1.Artifact{Digest: digest('i')}, CreatedAt: timestamppb.Now()}
		if err := tx.PutLegacyTemplateRevision(r, true, true); err != nil {
			return err
		}
		lc, err := tx.ReadLegacyCatalog()
		if err != nil {
			return err
		}
		if len(lc.Launches) != 1 || len(lc.Templates) != 1 || lc.DeploymentKey != "default" || lc.DeploymentTemplate != "busybox" ||
			lc.DefaultLaunch["default"] != "launch-1" || lc.DefaultRevision["busybox"] != "r-1" {
			t.Errorf("legacy catalog: %+v", lc)
		}
		if err := tx.ClearLegacyCatalog(); err != nil {
			return err
		}
		if lc, err = tx.ReadLegacyCatalog(); err != nil || len(lc.Launches)+len(lc.Templates)+len(lc.DefaultLaunch) != 0 {
			t.Errorf("after clearing: %+v %v", lc, err)
		}
		return nil
	})
}

// testCatalogReadsSeeEveryWrite reads the catalog rows and settings that
// SQLite's writer keeps in memory (the row cache) after each kind of write
// to them: committed, and made by a transaction that then failed after
// reading its own write.
func testCatalogReadsSeeEveryWrite(t *testing.T, dsn string) {
	s := Open(t, dsn)
	boom := errors.New("boom")
	defaultLaunch := func(want string) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error {
			l, err := tx.DefaultLaunch("")
			if err != nil {
				return err
			}
			if l.GetLaunchRef() != want {
				t.Errorf("default launch %s, want %s", l.GetLaunchRef(), want)
			}
			return nil
		})
	}
	setDefault := func(tx *store.Tx, ref string, version uint64) error {
		return tx.PutPlatformKey(&operatorv1.PlatformKey{PlatformKey: "k", DefaultLaunchRef: ref, Version: version})
	}
	mustTx(t, s, func(tx *store.Tx) error {
		for rev := uint64(1); rev <= 2; rev++ {
			if err := tx.InsertLaunch(launch("k", rev)); err != nil {
				return err
			}
		}
		if err := setDefault(tx, "k-1", 1); err != nil {
			return err
		}
		return tx.SetDeploymentDefaultPlatformKey("k")
	})
	defaultLaunch("k-1")
	mustTx(t, s, func(tx *store.Tx) error { return setDefault(tx, "k-2", 2) })
	defaultLaunch("k-2")
	err := s.Tx(ctx, func(tx *store.Tx) error {
		if err := setDefault(tx, "k-1", 3); err != nil {
			return err
		}
		if l, err := tx.DefaultLaunch(""); err != nil || l.GetLaunchRef() != "k-1" {
			t.Errorf("default launch read after its write in one transaction: %v, %v", l, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	defaultLaunch("k-2")

	setting := func(want string) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error {
			v, err := tx.Setting("cached")
			if string(v) != want {
				t.Errorf("setting %q (%v), want %q", v, err, want)
			}
			return nil
		})
	}
	setting("")
	mustTx(t, s, func(tx *store.Tx) error {
		_, err := tx.InitSetting("cached", []byte("one"))
		return err
	})
	setting("one")
	mustTx(t, s, func(tx *store.Tx) error {
		_, err := tx.PutSetting("cached", []byte("one"), []byte("two"))
		return err
	})
	setting("two")
	err = s.Tx(ctx, func(tx *store.Tx) error {
		if _, err := tx.PutSetting("cached", []byte("two"), []byte("three")); err != nil {
			return err
		}
		if v, err := tx.Setting("cached"); string(v) != "three" {
			t.Errorf("setting read after its write in one transaction: %q, %v", v, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	setting("two")

	rev := &operatorv1.TemplateRevision{Ref: &ctrlv1.TemplateRef{Template: "t", Revision: "r"}, State: operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING}
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutTemplate(&operatorv1.Template{Template: "t"}); err != nil {
			return err
		}
		return tx.InsertTemplateRevision(rev)
	})
	state := func(want operatorv1.TemplateRevisionState) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error {
			r, err := tx.GetTemplateRevision("t", "r", false)
			if err != nil {
				return err
			}
			if r.GetState() != want {
				t.Errorf("revision %v, want %v", r.GetState(), want)
			}
			return nil
		})
	}
	state(operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING)
	rev.State = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY
	mustTx(t, s, func(tx *store.Tx) error { return tx.UpdateTemplateRevision(rev) })
	state(operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY)
	mustTx(t, s, func(tx *store.Tx) error {
		if name, err := tx.DeploymentDefaultTemplate(); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("deployment default template before one is set: %q, %v", name, err)
		}
		return tx.SetDeploymentDefaultTemplate("t")
	})
	mustTx(t, s, func(tx *store.Tx) error {
		if name, err := tx.DeploymentDefaultTemplate(); name != "t" || err != nil {
			t.Errorf("deployment default template %q, %v; want t", name, err)
		}
		if tm, err := tx.GetTemplate("t", false); err != nil || !tm.GetDeploymentDefault() {
			t.Errorf("template t: %v, %v; want the deployment default", tm, err)
		}
		return nil
	})
}
