package store

import (
	"database/sql"
	"errors"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// TransferRecord is a stored Transfer with the archive's own manifest
// (implementation-private JSON, nil until the archive is verified).
type TransferRecord struct {
	Transfer        *ctrlv1.Transfer
	ArchiveManifest []byte
}

// transferGone: DELETED and EXPIRED Transfers are hidden from lists.
func transferGone(s ctrlv1.TransferState) bool {
	return s == ctrlv1.TransferState_TRANSFER_STATE_DELETED || s == ctrlv1.TransferState_TRANSFER_STATE_EXPIRED
}

// GetTransfer reads one Transfer, deleted ones included.
func (t *Tx) GetTransfer(id string, lock bool) (*TransferRecord, error) {
	q := "SELECT archive_manifest, body FROM transfers WHERE transfer_id = ?"
	if lock {
		q += t.d.lock
	}
	var manifest, body []byte
	if err := t.queryRow(q, id).Scan(&manifest, &body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	r := &TransferRecord{Transfer: &ctrlv1.Transfer{}, ArchiveManifest: manifest}
	return r, unmarshal(body, r.Transfer)
}

// PutTransfer writes a Transfer.
func (t *Tx) PutTransfer(r *TransferRecord) error {
	tr := r.Transfer
	var expires int64
	if tr.GetExpiresAt() != nil {
		expires = tr.GetExpiresAt().AsTime().UnixNano()
	}
	return t.upsert("transfers", []string{"transfer_id", "state", "deleted", "expires_at", "archive_manifest", "body"},
		tr.GetTransferId(), int64(tr.GetState()), boolInt(transferGone(tr.GetState())), expires, r.ArchiveManifest, marshal(tr))
}

// ListTransfers pages undeleted Transfers by transfer_id after the one given.
func (t *Tx) ListTransfers(after string, limit int) ([]*ctrlv1.Transfer, error) {
	return listBodies(t, "transfers", "transfer_id", after, "deleted = 0", limit, func() *ctrlv1.Transfer { return &ctrlv1.Transfer{} })
}

// ExpiredTransfers lists undeleted Transfers whose deadline is at or before
// now (Unix nanoseconds).
func (t *Tx) ExpiredTransfers(now int64, limit int) ([]*ctrlv1.Transfer, error) {
	return listBodies(t, "transfers", "transfer_id", "", "deleted = 0 AND expires_at > 0 AND expires_at <= ?",
		limit, func() *ctrlv1.Transfer { return &ctrlv1.Transfer{} }, now)
}

// TransfersInState lists Transfers in state, by transfer_id.
func (t *Tx) TransfersInState(state ctrlv1.TransferState, limit int) ([]*ctrlv1.Transfer, error) {
	return listBodies(t, "transfers", "transfer_id", "", "state = ?", limit,
		func() *ctrlv1.Transfer { return &ctrlv1.Transfer{} }, int64(state))
}
