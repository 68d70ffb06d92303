-- Storage pools (NodeRegistrationService's pool RPCs). storage_pools holds
-- every pool a node registration ever named (PutNode adds it), with what the
-- operator set on it: capacity_bytes (0 while unset, since a set capacity is
-- greater than zero), the pool's own version, and lost_at (Unix nanos, 0
-- while not lost). Attachments are read from the node registrations.
--
-- What a pool reserves is summed from the objects in it, which carry the
-- columns for it: a Volume's declared capacity, and the pool and declared
-- capacity of each Workspace's writable layer. Rows written before this
-- migration take them from their bodies (store.backfillPools runs in the
-- same transaction).
CREATE TABLE storage_pools (
    storage_pool       TEXT PRIMARY KEY,
    capacity_bytes     BIGINT NOT NULL DEFAULT 0,
    version            BIGINT NOT NULL DEFAULT 1,
    lost_at            BIGINT NOT NULL DEFAULT 0,
    first_declared_at  BIGINT NOT NULL
);
ALTER TABLE volumes ADD COLUMN capacity_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspace_runtime ADD COLUMN layer_pool TEXT NOT NULL DEFAULT '';
ALTER TABLE workspace_runtime ADD COLUMN layer_capacity_bytes BIGINT NOT NULL DEFAULT 0;
CREATE INDEX workspace_runtime_layer_pool ON workspace_runtime (layer_pool);
