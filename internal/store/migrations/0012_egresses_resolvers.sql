-- Egresses and Resolvers: caller-owned proxies and DNS upstreams a
-- Workspace's network policy names. body is the whole record, the Egress
-- password included (the API never returns it). drain_seconds is the
-- drain_seconds of the update that made the Egress's current revision, 0
-- for the first: how long a node keeps connections of the revision before.
CREATE TABLE egresses (
    egress_id      TEXT PRIMARY KEY,
    deleted        BIGINT NOT NULL DEFAULT 0,
    drain_seconds  BIGINT NOT NULL DEFAULT 0,
    body           {{BYTES}} NOT NULL
);

CREATE TABLE resolvers (
    resolver_id  TEXT PRIMARY KEY,
    deleted      BIGINT NOT NULL DEFAULT 0,
    body         {{BYTES}} NOT NULL
);

-- policy_references holds one row for each Egress (kind 'egress') and
-- Resolver (kind 'resolver') an undeleted Workspace's network policy names,
-- written with the Workspace, so that deleting one finds who uses it
-- without reading every Workspace. No Workspace could name either before
-- this migration, so there is nothing to backfill.
CREATE TABLE policy_references (
    kind          TEXT NOT NULL,
    ref_id        TEXT NOT NULL,
    workspace_id  TEXT NOT NULL,
    PRIMARY KEY (kind, ref_id, workspace_id)
);
CREATE INDEX policy_references_workspace ON policy_references (workspace_id);
