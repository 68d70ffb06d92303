package workspace

import (
	"errors"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// resolveTemplate is the exact TemplateRef selector sel names, resolved at
// admission so that the Workspace a create returns, and every read of it,
// carries it. An empty template is the deployment default, an empty
// revision the Template's default. A Template or revision that does not
// exist is not_found naming field's member; one that exists but cannot
// boot (not READY) is failed_precondition: nothing would ever place it.
func resolveTemplate(tx *store.Tx, field string, sel *ctrlv1.TemplateSelector) (*ctrlv1.TemplateRef, error) {
	name := sel.GetTemplate()
	if name == "" {
		def, err := tx.DeploymentDefaultTemplate()
		if errors.Is(err, store.ErrNotFound) {
			return nil, missingTemplate(field+".template", "no deployment default Template is set: name a Template (kibotos dev registers one at first start)")
		} else if err != nil {
			return nil, err
		}
		name = def
	}
	tm, err := tx.GetTemplate(name, false)
	if errors.Is(err, store.ErrNotFound) || (err == nil && tm.GetDeletedAt() != nil) {
		return nil, missingTemplate(field+".template", "template %q not found", name)
	} else if err != nil {
		return nil, err
	}
	rev := sel.GetRevision()
	if rev == "" {
		if rev = tm.GetDefaultRevision(); rev == "" {
			return nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: field + ".revision"}, "template %q has no READY revision yet", name)
		}
	}
	r, err := tx.GetTemplateRevision(name, rev, false)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.GetState() == operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED) {
		return nil, missingTemplate(field+".revision", "template revision %s@%s not found", name, rev)
	} else if err != nil {
		return nil, err
	}
	if r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		return nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: field + ".revision"}, "template revision %s@%s is %s; only a READY revision boots", name, rev, r.GetState())
	}
	return &ctrlv1.TemplateRef{Template: name, Revision: rev}, nil
}

func missingTemplate(field, format string, args ...any) error {
	return apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field}, format, args...)
}
