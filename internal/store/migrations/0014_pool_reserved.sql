-- Pool reservations kept as counters (issue 15).
--
-- pool_reserved holds, per storage pool, the sum of the declared
-- capacities of the objects living in it: Volumes not DELETING or DELETED,
-- and the writable layers (workspace_runtime.layer_pool) of Workspaces not
-- DELETING or DELETED. A new object is admitted against it (pool.Reserve)
-- instead of against a sum over every object of the pool, which grew with
-- the number of Volumes and held the pool's row lock while it ran.
--
-- Triggers on volumes, workspaces and workspace_runtime keep it, so every
-- write path (upserts, the migrations' backfills, a row deleted) moves it
-- in the same transaction. They are written per dialect in Go
-- (store.reservedTriggers, migration hook 14), which also fills it from
-- the rows already there. Objects moving into a pool (pool_moves) are still
-- summed: there are only as many as moves in flight.
CREATE TABLE pool_reserved (
    storage_pool TEXT PRIMARY KEY,
    bytes        BIGINT NOT NULL DEFAULT 0
);
