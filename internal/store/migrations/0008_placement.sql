-- Placement (overcommit, placement, ListWorkspacePlacements).
--
-- node_placement is what placement filters on for each node, written by
-- PutNode from the registration (flags are 0 or 1, last_seen_at in Unix
-- nanos, cpu_ratio and memory_ratio are the node's overrides, 0 when it
-- follows the cluster-wide default, capabilities and pools are
-- comma-separated, pools only those the node reports available), so that a
-- placement reads narrow rows instead of every registration's body.
-- draining mirrors nodes.draining. The allocated_* columns and allocations
-- sum the node's Allocations: only Allocate and the releases change them,
-- in the transaction that changes allocations.
--
-- allocations holds one Allocation per Workspace: the Instance it is for,
-- the node charged and what it reserves there. Rows written before this
-- migration are filled from the registrations and from the executions
-- workspace_runtime records (store.backfillPlacement, same transaction).
CREATE TABLE node_placement (
    node_id                 TEXT PRIMARY KEY,
    admitted                BIGINT NOT NULL DEFAULT 0,
    isolated                BIGINT NOT NULL DEFAULT 0,
    live                    BIGINT NOT NULL DEFAULT 0,
    ready                   BIGINT NOT NULL DEFAULT 0,
    clock_skewed            BIGINT NOT NULL DEFAULT 0,
    memory_tight            BIGINT NOT NULL DEFAULT 0,
    draining                BIGINT NOT NULL DEFAULT 0,
    last_seen_at            BIGINT NOT NULL DEFAULT 0,
    cpu_millis              BIGINT NOT NULL DEFAULT 0,
    memory_bytes            BIGINT NOT NULL DEFAULT 0,
    cpu_ratio               BIGINT NOT NULL DEFAULT 0,
    memory_ratio            BIGINT NOT NULL DEFAULT 0,
    capabilities            TEXT NOT NULL DEFAULT '',
    pools                   TEXT NOT NULL DEFAULT '',
    default_pool            TEXT NOT NULL DEFAULT '',
    allocated_cpu_millis    BIGINT NOT NULL DEFAULT 0,
    allocated_memory_bytes  BIGINT NOT NULL DEFAULT 0,
    allocations             BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE allocations (
    workspace_id  TEXT PRIMARY KEY,
    instance_id   TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    cpu_millis    BIGINT NOT NULL,
    memory_bytes  BIGINT NOT NULL,
    allocated_at  BIGINT NOT NULL
);
CREATE INDEX allocations_node ON allocations (node_id, workspace_id);
CREATE INDEX allocations_instance ON allocations (instance_id);
