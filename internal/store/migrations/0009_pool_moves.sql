-- Moves between storage pools (MoveVolume, MoveWritableLayer).
--
-- pool_moves holds one row per object moving: object_key is
-- 'volume/<volume_id>' or 'layer/<workspace_id>', and the row says which
-- command moves it, from and to which pool, and the declared capacity it
-- reserves in target_pool until the move settles (in its source pool the
-- object reserves it as before, from its own record).
--
-- pool_cleanups holds the block files a pool still keeps of objects that no
-- longer live there (the source a move left, the target of a move that
-- failed) until a node removed them: cleanup_count counts them with the
-- deletions waiting on the pool. They reserve nothing.
CREATE TABLE pool_moves (
    object_key      TEXT PRIMARY KEY,
    command_id      TEXT NOT NULL,
    source_pool     TEXT NOT NULL,
    target_pool     TEXT NOT NULL,
    capacity_bytes  BIGINT NOT NULL
);
CREATE INDEX pool_moves_target ON pool_moves (target_pool);
CREATE TABLE pool_cleanups (
    storage_pool  TEXT NOT NULL,
    object_key    TEXT NOT NULL,
    command_id    TEXT NOT NULL,
    PRIMARY KEY (storage_pool, object_key)
);
