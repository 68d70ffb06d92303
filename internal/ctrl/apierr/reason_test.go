package apierr_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// One mapping, both ways: a node's code becomes a reason, and a failed
// command's reason answers with a code that maps back to it.
func TestCodeReasonMapping(t *testing.T) {
	for code, want := range map[connect.Code]ctrlv1.FailureReason{
		connect.CodeInvalidArgument:    ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST,
		connect.CodeFailedPrecondition: ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
		connect.CodeAborted:            ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
		connect.CodeResourceExhausted:  ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED,
		connect.CodeUnavailable:        ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
		connect.CodeInternal:           ctrlv1.FailureReason_FAILURE_REASON_INTERNAL,
		connect.CodeDataLoss:           ctrlv1.FailureReason_FAILURE_REASON_INTERNAL,
	} {
		if got := apierr.ReasonOf(code); got != want {
			t.Errorf("ReasonOf(%v) = %v, want %v", code, got, want)
		}
	}
	for reason, want := range map[ctrlv1.FailureReason]connect.Code{
		ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED: connect.CodeResourceExhausted,
		ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE:        connect.CodeUnavailable,
		ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND:          connect.CodeNotFound,
		ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST:        connect.CodeFailedPrecondition,
		ctrlv1.FailureReason_FAILURE_REASON_CONFLICT:           connect.CodeAborted,
		ctrlv1.FailureReason_FAILURE_REASON_INTERNAL:           connect.CodeAborted,
	} {
		if got := apierr.CodeOf(reason); got != want {
			t.Errorf("CodeOf(%v) = %v, want %v", reason, got, want)
		}
	}
	for _, reason := range []ctrlv1.FailureReason{
		ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND,
		ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
		ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT, ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED,
	} {
		if back := apierr.ReasonOf(apierr.CodeOf(reason)); back != reason {
			t.Errorf("%v answers %v, which maps back to %v", reason, apierr.CodeOf(reason), back)
		}
	}
}
