-- The catalog (platform Launch revisions and Template revisions), what ctrl
-- keeps of each Workspace's execution beside the API record, and how ctrl
-- reaches a node's data endpoint.
CREATE TABLE launches (
    launch_ref    TEXT PRIMARY KEY,
    platform_key  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    body          {{BYTES}} NOT NULL
);
CREATE TABLE platform_keys (
    platform_key        TEXT PRIMARY KEY,
    default_launch_ref  TEXT NOT NULL,
    deployment_default  BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE template_revisions (
    template    TEXT NOT NULL,
    revision    TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    body        {{BYTES}} NOT NULL,
    PRIMARY KEY (template, revision)
);
CREATE TABLE templates (
    template            TEXT PRIMARY KEY,
    default_revision    TEXT NOT NULL,
    deployment_default  BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE workspace_runtime (
    workspace_id  TEXT PRIMARY KEY,
    body          {{BYTES}} NOT NULL
);
ALTER TABLE nodes ADD COLUMN data_endpoint TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN data_token TEXT NOT NULL DEFAULT '';
