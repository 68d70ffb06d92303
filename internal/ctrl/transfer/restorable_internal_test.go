package transfer

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// Which Transfers a RestoreWorkspace takes (transfers.md, left open):
// COMPLETE, IMPORTED and RESTORED restore; EXPORTING, IMPORTING and
// RESTORING are unavailable until they end; FAILED, DELETED and EXPIRED,
// which keep no archive, are failed_precondition. Every refusal names
// transfer_id at RESTORING_WORKSPACE. The real-database paths of several
// of these are tested through the API in export_test.go; EXPIRED only
// here, as a sweep ends it like a delete.
func TestWhichTransfersRestore(t *testing.T) {
	for st, want := range map[ctrlv1.TransferState]connect.Code{
		ctrlv1.TransferState_TRANSFER_STATE_COMPLETE:  0,
		ctrlv1.TransferState_TRANSFER_STATE_IMPORTED:  0,
		ctrlv1.TransferState_TRANSFER_STATE_RESTORED:  0,
		ctrlv1.TransferState_TRANSFER_STATE_EXPORTING: connect.CodeUnavailable,
		ctrlv1.TransferState_TRANSFER_STATE_IMPORTING: connect.CodeUnavailable,
		ctrlv1.TransferState_TRANSFER_STATE_RESTORING: connect.CodeUnavailable,
		ctrlv1.TransferState_TRANSFER_STATE_FAILED:    connect.CodeFailedPrecondition,
		ctrlv1.TransferState_TRANSFER_STATE_DELETED:   connect.CodeFailedPrecondition,
		ctrlv1.TransferState_TRANSFER_STATE_EXPIRED:   connect.CodeFailedPrecondition,
	} {
		err := restorable("transfer_id", "tr-1", st)
		if want == 0 {
			if err != nil {
				t.Errorf("%v: %v, want it restores", st, err)
			}
			continue
		}
		d := apierr.DetailOf(err)
		if connect.CodeOf(err) != want || d.GetField() != "transfer_id" || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE {
			t.Errorf("%v: %v (%v), want %v naming transfer_id at RESTORING_WORKSPACE", st, err, d, want)
		}
	}
}
