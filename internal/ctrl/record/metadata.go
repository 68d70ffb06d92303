// Package record holds rules shared by the records of several domains.
package record

import (
	"context"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/store"
)

// MetadataUpdate is one replacement of a record's labels or annotations.
type MetadataUpdate[R proto.Message] struct {
	// Kind is the API method, e.g. "UpdateVolumeLabels".
	Kind string
	// Annotations says the map is annotations (else labels).
	Annotations bool
	Command     *ctrlv1.CommandMetadata
	Request     proto.Message
	ID          string
	Expected    uint64
	Values      map[string]string
	// RevisionField names the CAS token in the request, for errors.
	RevisionField string

	// Load reads and locks the record; Check refuses states that do not
	// allow the change; Slot picks the map and revision; Save writes the
	// record (with its updated_at); Stale is the failed_precondition error;
	// Result is the answer.
	Load   func(tx *store.Tx, id string) (R, error)
	Check  func(r R) error
	Slot   func(r R) (*map[string]string, *uint64)
	Save   func(tx *store.Tx, r R, now time.Time) error
	Stale  func(r R, format string, args ...any) error
	Result func(r R) proto.Message
}

// ReplaceMetadata admits u: a stale revision is failed_precondition and
// writes nothing; the same content leaves the revision as it is; a change
// increases it by one. A replay answers the recorded result.
func ReplaceMetadata[R proto.Message](ctx context.Context, s *store.Store, now time.Time, u MetadataUpdate[R]) (proto.Message, error) {
	if err := command.ValidateID("command.command_id", u.Command); err != nil {
		return nil, err
	}
	field, validate := "labels", labels.ValidateLabels
	if u.Annotations {
		field, validate = "annotations", labels.ValidateAnnotations
	}
	if err := validate(field, u.Values); err != nil {
		return nil, err
	}
	var out proto.Message
	err := command.Do(ctx, s, func(tx *store.Tx) error {
		var err error
		out, err = command.Admit(tx, now, u.Command.GetCommandId(), u.Kind, u.Request, func() (command.Effect, error) {
			r, err := u.Load(tx, u.ID)
			if err != nil {
				return command.Effect{}, err
			}
			if err := u.Check(r); err != nil {
				return command.Effect{}, err
			}
			values, revision := u.Slot(r)
			if u.Expected != *revision {
				return command.Effect{}, u.Stale(r, "%s %d is stale: the current revision is %d", u.RevisionField, u.Expected, *revision)
			}
			if !maps.Equal(*values, u.Values) {
				*values = u.Values
				*revision++
				if err := u.Save(tx, r, now); err != nil {
					return command.Effect{}, err
				}
			}
			return command.Effect{Target: u.ID, Result: u.Result(r)}, nil
		})
		return err
	})
	return out, err
}
