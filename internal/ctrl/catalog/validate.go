package catalog

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

var (
	keyPattern      = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,62}$`)
	templatePattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)
	revisionPattern = regexp.MustCompile(`^[a-z0-9._-]{1,63}$`)
	archPattern     = regexp.MustCompile(`^[a-z0-9]{1,32}$`)
)

const maxDescription = 1024

func checkDescription(field, d string) error {
	if len(d) > maxDescription {
		return apierr.Invalid(field, "is %d bytes; at most %d", len(d), maxDescription)
	}
	return nil
}

func checkName(field, name string, p *regexp.Regexp, rule string) error {
	if !p.MatchString(name) {
		return apierr.Invalid(field, "must be %s", rule)
	}
	return nil
}

const (
	keyRule      = "1 to 63 characters of lowercase letters, digits, '.' and '-', starting with a letter"
	templateRule = "1 to 63 characters of lowercase letters, digits and '-', starting with a letter and not ending with '-'"
	revisionRule = "1 to 63 characters of lowercase letters, digits, '.', '_' and '-'"
)

// checkCreate validates what a create carries: its command_id, the new
// name and a description.
func checkCreate(m *ctrlv1.CommandMetadata, field, name string, p *regexp.Regexp, rule, description string) error {
	if err := command.ValidateID("command.command_id", m); err != nil {
		return err
	}
	if err := checkName(field, name, p, rule); err != nil {
		return err
	}
	return checkDescription("description", description)
}

// conflict is already_exists naming field.
func conflict(field, format string, args ...any) error {
	return apierr.New(connect.CodeAlreadyExists, &ctrlv1.ErrorDetail{
		Stage: ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING, Reason: ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, Field: field,
	}, "%s", fmt.Sprintf(format, args...))
}

// missing is not_found naming the request field that names the object.
func missing(field, format string, args ...any) error {
	return apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{
		Stage: ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING, Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field,
	}, "%s", fmt.Sprintf(format, args...))
}

// notFound maps the store's ErrNotFound to not_found naming the object.
func notFound(err error, kind, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return apierr.NotFound(kind, id)
	}
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
