-- The pools declared lost, indexed (issue 15).
--
-- Every batch of node observations reads the set of lost pools
-- (LostPools), to mark them in the registrations it writes. With a pool
-- per node, storage_pools has as many rows as the fleet has nodes, and the
-- read scanned all of them: at 10,000 nodes it was 18% of an idle ctrl's
-- CPU. A partial index holds only the lost pools (usually none), and both
-- SQLite and PostgreSQL use it for the query's own condition.
CREATE INDEX storage_pools_lost ON storage_pools (storage_pool) WHERE lost_at <> 0;
