package apierr

import (
	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// codeReasons is the one mapping between canonical codes and
// FailureReasons: a node's failure code becomes a command's reason
// (ReasonOf), and a failed command's reason the code its caller is
// answered with (CodeOf). Where several codes share a reason, the first
// listed is the one CodeOf answers.
var codeReasons = []struct {
	code   connect.Code
	reason ctrlv1.FailureReason
}{
	{connect.CodeInvalidArgument, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST},
	{connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND},
	{connect.CodeAborted, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT},
	{connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT},
	{connect.CodeAlreadyExists, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT},
	{connect.CodeResourceExhausted, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED},
	{connect.CodeUnimplemented, ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED},
	{connect.CodeUnavailable, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE},
	{connect.CodeDeadlineExceeded, ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT},
	{connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED},
	// A lost Volume is a state the caller must look at, not a race.
	{connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST},
}

// ReasonOf is the FailureReason of a canonical code; INTERNAL for a code
// the mapping does not name.
func ReasonOf(code connect.Code) ctrlv1.FailureReason {
	for _, m := range codeReasons {
		if m.code == code {
			return m.reason
		}
	}
	return ctrlv1.FailureReason_FAILURE_REASON_INTERNAL
}

// CodeOf is the canonical code a failure of reason answers with; aborted
// for a reason the mapping does not name (the command failed: the caller
// may look and try again).
func CodeOf(reason ctrlv1.FailureReason) connect.Code {
	for _, m := range codeReasons {
		if m.reason == reason {
			return m.code
		}
	}
	return connect.CodeAborted
}
