-- Data-plane sessions (SessionService): short-lived credentials for one
-- Workspace's data plane. Only hashes of tokens are kept. A rotated
-- session's previous token works until previous_expires_at (unix nanos).
CREATE TABLE data_plane_sessions (
    session_id           TEXT PRIMARY KEY,
    workspace_id         TEXT NOT NULL,
    token_hash           TEXT NOT NULL UNIQUE,
    previous_token_hash  TEXT NOT NULL DEFAULT '',
    previous_expires_at  BIGINT NOT NULL DEFAULT 0,
    revoked              BIGINT NOT NULL DEFAULT 0,
    body                 {{BYTES}} NOT NULL
);
CREATE INDEX data_plane_sessions_previous ON data_plane_sessions (previous_token_hash);
CREATE INDEX data_plane_sessions_workspace ON data_plane_sessions (workspace_id);
