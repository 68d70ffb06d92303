package workspace_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// A create resolves its TemplateSelector at admission: the Workspace the
// call returns, and every read while it is CREATING, carry the exact
// TemplateRef (an empty template is the deployment default, an empty
// revision the Template's default).
func TestCreateStoresTheTemplateRefItsSelectorResolvedTo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		storetest.PutReadyTemplate(t, e.store, "tools", "7", false)
		for i, tc := range []struct {
			sel  *ctrlv1.TemplateSelector
			want *ctrlv1.TemplateRef
		}{
			{nil, &ctrlv1.TemplateRef{Template: "busybox", Revision: "1"}},
			{&ctrlv1.TemplateSelector{Template: "tools"}, &ctrlv1.TemplateRef{Template: "tools", Revision: "7"}},
			{&ctrlv1.TemplateSelector{Template: "tools", Revision: "7"}, &ctrlv1.TemplateRef{Template: "tools", Revision: "7"}},
		} {
			s := spec(256 * mib)
			s.Template = tc.sel
			res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c" + string(rune('1'+i))), Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.GetWorkspace().GetSpec().GetTemplate(); got.GetTemplate() != tc.want.GetTemplate() || got.GetRevision() != tc.want.GetRevision() {
				t.Errorf("selector %v: CreateWorkspace returned template %v, want %v", tc.sel, got, tc.want)
			}
			w := get(t, e, res.GetWorkspace().GetWorkspaceId())
			if got := w.GetSpec().GetTemplate(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || got.GetTemplate() != tc.want.GetTemplate() || got.GetRevision() != tc.want.GetRevision() {
				t.Errorf("selector %v: GetWorkspace while CREATING: %v %v, want template %v", tc.sel, w.GetState(), got, tc.want)
			}
		}
	})
}

// A selector naming a Template or revision that does not exist is
// not_found at admission, naming the field, and admits nothing: no
// Workspace, no command, no Volume.
func TestCreateWithATemplateThatDoesNotExistAdmitsNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, tc := range []struct {
			name  string
			sel   *ctrlv1.TemplateSelector
			field string
		}{
			{"no such template", &ctrlv1.TemplateSelector{Template: "nope"}, "spec.template.template"},
			{"no such revision", &ctrlv1.TemplateSelector{Template: "busybox", Revision: "9"}, "spec.template.revision"},
			{"no such revision of the default", &ctrlv1.TemplateSelector{Revision: "9"}, "spec.template.revision"},
		} {
			s := spec(256 * mib)
			s.Template = tc.sel
			_, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c-" + tc.field + tc.sel.GetTemplate()), Spec: s})
			if connect.CodeOf(err) != connect.CodeNotFound || apierr.FieldOf(err) != tc.field {
				t.Errorf("%s: %v (field %q), want not_found naming %s", tc.name, err, apierr.FieldOf(err), tc.field)
			}
			if _, err := e.ws.GetCommand(ctx, &ctrlv1.GetWorkspaceCommandRequest{CommandId: "c-" + tc.field + tc.sel.GetTemplate()}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("%s: the refused create left a command: %v", tc.name, err)
			}
		}
		// CreateWorkspaceOnNode takes the same selector.
		s := spec(256 * mib)
		s.Template = &ctrlv1.TemplateSelector{Template: "nope"}
		_, err := e.ws.CreateOnNode(ctx, &operatorv1.CreateWorkspaceOnNodeRequest{NodeId: "node-a", Request: &ctrlv1.CreateWorkspaceRequest{Command: cmd("c-on-node"), Spec: s}})
		if connect.CodeOf(err) != connect.CodeNotFound || apierr.FieldOf(err) != "spec.template.template" {
			t.Errorf("CreateWorkspaceOnNode naming no template: %v (field %q), want not_found naming spec.template.template", err, apierr.FieldOf(err))
		}
		checkNothingAdmitted(t, e)
	})
}

// With no deployment default Template, an empty selector names nothing:
// not_found naming spec.template.template.
func TestCreateWithoutADefaultTemplateAdmitsNothing(t *testing.T) {
	e := newBareEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	_, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
	if connect.CodeOf(err) != connect.CodeNotFound || apierr.FieldOf(err) != "spec.template.template" {
		t.Errorf("no default template: %v (field %q), want not_found naming spec.template.template", err, apierr.FieldOf(err))
	}
	checkNothingAdmitted(t, e)
}

// checkNothingAdmitted: refused creates left no Workspace and no Volume.
func checkNothingAdmitted(t *testing.T, e *env) {
	t.Helper()
	list, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{IncludeDeleted: true})
	if err != nil || len(list.GetWorkspaces()) != 0 {
		t.Errorf("a refused create admitted a Workspace: %v %v", list, err)
	}
	vols, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{IncludeDeleted: true})
	if err != nil || len(vols.GetVolumes()) != 0 {
		t.Errorf("a refused create made a Volume: %v %v", vols, err)
	}
}
