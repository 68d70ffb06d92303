-- Transfers: exported and imported archives. body is the Transfer as the
-- API shows it, and archive_manifest is the archive's own manifest (JSON, as
-- internal/transfer/archive reads it), implementation-private and never
-- projected. deleted is 1 once the Transfer is DELETED or EXPIRED: lists
-- hide it, GetTransfer still answers it. expires_at is the deadline in Unix
-- nanoseconds, 0 for none. state is the TransferState, so the sweeper finds
-- the Transfers an interrupted delete or upload left behind.
CREATE TABLE transfers (
    transfer_id       TEXT PRIMARY KEY,
    state             BIGINT NOT NULL,
    deleted           BIGINT NOT NULL DEFAULT 0,
    expires_at        BIGINT NOT NULL DEFAULT 0,
    archive_manifest  {{BYTES}},
    body              {{BYTES}} NOT NULL
);
CREATE INDEX transfers_expires_at ON transfers (expires_at);
CREATE INDEX transfers_state ON transfers (state);
