// Package apierr builds the canonical Connect errors ctrl answers with, each
// carrying a kibotos.ctrl.v1.ErrorDetail.
//
// Stale CAS tokens are failed_precondition everywhere (never aborted): the
// caller must read again before retrying, which is what failed_precondition
// means in the canonical codes.
package apierr

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// New makes a Connect error with code and detail. detail may be nil.
func New(code connect.Code, detail *ctrlv1.ErrorDetail, format string, args ...any) *connect.Error {
	err := connect.NewError(code, fmt.Errorf(format, args...))
	if detail != nil {
		if d, derr := connect.NewErrorDetail(detail); derr == nil {
			err.AddDetail(d)
		}
	}
	return err
}

// Invalid is invalid_argument naming field (a dotted request path such as
// "spec.resources.memory_bytes"), at the VALIDATING stage.
func Invalid(field, format string, args ...any) *connect.Error {
	msg := fmt.Sprintf(format, args...)
	return New(connect.CodeInvalidArgument, &ctrlv1.ErrorDetail{
		Stage:  ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING,
		Reason: ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST,
		Field:  field,
	}, "%s: %s", field, msg)
}

// NotFound is not_found for a named object.
func NotFound(kind, id string) *connect.Error {
	return New(connect.CodeNotFound, &ctrlv1.ErrorDetail{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND,
	}, "%s %q not found", kind, id)
}

// Conflict is already_exists: a command_id reused with different input.
func Conflict(commandID string) *connect.Error {
	return New(connect.CodeAlreadyExists, &ctrlv1.ErrorDetail{
		Stage:     ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING,
		Reason:    ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
		Field:     "command.command_id",
		CommandId: commandID,
	}, "command %q was already admitted with different input", commandID)
}

// Precondition is failed_precondition, for a stale CAS token or a state that
// does not allow the call. detail may carry the observed record.
func Precondition(detail *ctrlv1.ErrorDetail, format string, args ...any) *connect.Error {
	if detail == nil {
		detail = &ctrlv1.ErrorDetail{}
	}
	if detail.Reason == ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED {
		detail.Reason = ctrlv1.FailureReason_FAILURE_REASON_CONFLICT
	}
	return New(connect.CodeFailedPrecondition, detail, format, args...)
}

// FieldOf returns the field an invalid_argument error names, or "".
func FieldOf(err error) string { return DetailOf(err).GetField() }

// AtStage is err with stage in its ErrorDetail when err is an API error
// whose detail names none: a call's own checks that are shared with other
// calls say which call refused. Any other error is returned as it is.
func AtStage(err error, stage ctrlv1.FailureStage) error {
	var cerr *connect.Error
	d := DetailOf(err)
	if !errors.As(err, &cerr) || d == nil || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_UNSPECIFIED {
		return err
	}
	staged := proto.CloneOf(d)
	staged.Stage = stage
	out := New(cerr.Code(), staged, "%s", cerr.Message())
	for _, other := range cerr.Details() { // the others as they were
		if v, verr := other.Value(); verr == nil {
			if _, isDetail := v.(*ctrlv1.ErrorDetail); isDetail {
				continue
			}
		}
		out.AddDetail(other)
	}
	return out
}

// DetailOf returns the ErrorDetail an API error carries, or nil.
func DetailOf(err error) *ctrlv1.ErrorDetail {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}
