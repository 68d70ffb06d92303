-- Records are stored as protobuf bytes in body, with the columns queries
-- filter, order or lock on beside them. Times are Unix nanoseconds (BIGINT) so
-- SQLite and PostgreSQL compare them the same way. {{BYTES}} is BLOB on SQLite
-- and BYTEA on PostgreSQL.

CREATE TABLE commands (
    command_id      TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,
    target_id       TEXT NOT NULL,
    input_hash      {{BYTES}} NOT NULL,
    state           TEXT NOT NULL,
    result          {{BYTES}},
    body            {{BYTES}} NOT NULL,
    admitted_at     BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_owner     TEXT NOT NULL DEFAULT '',
    lease_until     BIGINT NOT NULL DEFAULT 0,
    attempts        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX commands_pending ON commands (state, next_attempt_at);
CREATE INDEX commands_target ON commands (target_id, admitted_at);

CREATE TABLE volumes (
    volume_id          TEXT PRIMARY KEY,
    state              TEXT NOT NULL,
    storage_pool       TEXT NOT NULL,
    bound_workspace_id TEXT NOT NULL DEFAULT '',
    deleted            BIGINT NOT NULL DEFAULT 0,
    body               {{BYTES}} NOT NULL
);
CREATE INDEX volumes_pool ON volumes (storage_pool);

CREATE TABLE workspaces (
    workspace_id         TEXT PRIMARY KEY,
    state                TEXT NOT NULL,
    deleted              BIGINT NOT NULL DEFAULT 0,
    expiration_deadline  BIGINT NOT NULL DEFAULT 0,
    body                 {{BYTES}} NOT NULL
);
CREATE INDEX workspaces_expiration ON workspaces (deleted, expiration_deadline);

CREATE TABLE nodes (
    node_id          TEXT PRIMARY KEY,
    credential_hash  TEXT NOT NULL DEFAULT '',
    body             {{BYTES}} NOT NULL
);

CREATE TABLE enrollment_grants (
    grant_id     TEXT PRIMARY KEY,
    secret_hash  TEXT NOT NULL UNIQUE,
    body         {{BYTES}} NOT NULL
);

-- settings holds small values every ctrl replica shares, e.g. the key grant
-- secrets are derived with.
CREATE TABLE settings (
    name   TEXT PRIMARY KEY,
    value  {{BYTES}} NOT NULL
);
