package storetest

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunTransfers runs the store tests of Transfers against databases from b.
func RunTransfers(t *testing.T, b Backend) {
	for name, fn := range map[string]func(*testing.T, string){
		"TransfersKeepManifestAndHideDeleted": testTransfersKeepManifestAndHideDeleted,
		"TransfersDueAndByState":              testTransfersDueAndByState,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

func testTransfersKeepManifestAndHideDeleted(t *testing.T, dsn string) {
	s := Open(t, dsn)
	a := &ctrlv1.Transfer{TransferId: "tr-a", State: ctrlv1.TransferState_TRANSFER_STATE_IMPORTED, Labels: map[string]string{"k": "v"},
		Manifest: &ctrlv1.TransferManifest{SizeBytes: 42, Digest: "sha256:00"}}
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutTransfer(&store.TransferRecord{Transfer: a, ArchiveManifest: []byte(`{"parts":[]}`)}); err != nil {
			return err
		}
		for _, st := range []ctrlv1.TransferState{ctrlv1.TransferState_TRANSFER_STATE_DELETED, ctrlv1.TransferState_TRANSFER_STATE_EXPIRED} {
			if err := tx.PutTransfer(&store.TransferRecord{Transfer: &ctrlv1.Transfer{TransferId: "tr-" + st.String(), State: st}}); err != nil {
				return err
			}
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		got, err := tx.GetTransfer("tr-a", true)
		if err != nil || !proto.Equal(got.Transfer, a) || string(got.ArchiveManifest) != `{"parts":[]}` {
			t.Errorf("GetTransfer = %v, %v; want %v with its archive manifest", got, err, a)
		}
		if gone, err := tx.GetTransfer("tr-TRANSFER_STATE_DELETED", false); err != nil || gone.ArchiveManifest != nil {
			t.Errorf("a DELETED Transfer: %v, %v; want it read, without a manifest", gone, err)
		}
		if _, err := tx.GetTransfer("tr-c", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown transfer: %v", err)
		}
		list, err := tx.ListTransfers("", 10)
		if err != nil || len(list) != 1 || list[0].GetTransferId() != "tr-a" {
			t.Errorf("ListTransfers = %v, %v; want tr-a only (the others are DELETED and EXPIRED)", list, err)
		}
		return nil
	})
}

func testTransfersDueAndByState(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	put := func(tx *store.Tx, id string, st ctrlv1.TransferState, expires time.Time) error {
		tr := &ctrlv1.Transfer{TransferId: id, State: st}
		if !expires.IsZero() {
			tr.ExpiresAt = timestamppb.New(expires)
		}
		return tx.PutTransfer(&store.TransferRecord{Transfer: tr})
	}
	mustTx(t, s, func(tx *store.Tx) error {
		return errors.Join(
			put(tx, "tr-past", ctrlv1.TransferState_TRANSFER_STATE_IMPORTED, now.Add(-time.Second)),
			put(tx, "tr-now", ctrlv1.TransferState_TRANSFER_STATE_IMPORTING, now),
			put(tx, "tr-later", ctrlv1.TransferState_TRANSFER_STATE_IMPORTED, now.Add(time.Second)),
			put(tx, "tr-never", ctrlv1.TransferState_TRANSFER_STATE_IMPORTING, time.Time{}),
			put(tx, "tr-expired", ctrlv1.TransferState_TRANSFER_STATE_EXPIRED, now.Add(-time.Hour)),
		)
	})
	mustTx(t, s, func(tx *store.Tx) error {
		due, err := tx.ExpiredTransfers(now.UnixNano(), 10)
		if err != nil || len(due) != 2 || due[0].GetTransferId() != "tr-now" || due[1].GetTransferId() != "tr-past" {
			t.Errorf("ExpiredTransfers = %v, %v; want tr-now and tr-past", due, err)
		}
		importing, err := tx.TransfersInState(ctrlv1.TransferState_TRANSFER_STATE_IMPORTING, 10)
		if err != nil || len(importing) != 2 || importing[0].GetTransferId() != "tr-never" || importing[1].GetTransferId() != "tr-now" {
			t.Errorf("TransfersInState(IMPORTING) = %v, %v; want tr-never and tr-now", importing, err)
		}
		return nil
	})
}
