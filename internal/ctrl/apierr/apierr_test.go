package apierr_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// AtStage names a stage where the refusal named none, keeps its code,
// message, the rest of its detail and its other details, and leaves a
// stage already named, and errors that are not API errors, as they are.
func TestAtStageNamesAStageOnlyWhereNoneWas(t *testing.T) {
	const stage = ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_WRITABLE_LAYER
	refusal := apierr.Precondition(&ctrlv1.ErrorDetail{CommandId: "c1"}, "stale: %d", 3)
	other, err := connect.NewErrorDetail(&ctrlv1.Volume{VolumeId: "vol-1"})
	if err != nil {
		t.Fatal(err)
	}
	refusal.AddDetail(other)

	got := apierr.AtStage(refusal, stage)
	var cerr *connect.Error
	if !errors.As(got, &cerr) || cerr.Code() != connect.CodeFailedPrecondition || cerr.Message() != refusal.Message() {
		t.Fatalf("AtStage: %v, want the refusal's code and message", got)
	}
	if d := apierr.DetailOf(got); d.GetStage() != stage || d.GetCommandId() != "c1" || d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CONFLICT {
		t.Errorf("detail %v, want the stage added to the rest", d)
	}
	if len(cerr.Details()) != 2 {
		t.Errorf("%d details, want the ErrorDetail and the other one", len(cerr.Details()))
	}
	if d := apierr.DetailOf(apierr.AtStage(apierr.Invalid("x", "bad"), stage)); d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING {
		t.Errorf("a stage already named became %v", d.GetStage())
	}
	plain := errors.New("not an API error")
	if apierr.AtStage(plain, stage) != plain {
		t.Error("a plain error changed")
	}
}
