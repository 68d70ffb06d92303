-- The node lifecycle (DrainNode, IsolateNode, RetireNode): whether a node is
-- draining, and on which node each Workspace's current execution runs, so
-- that a drain sees when nothing runs on its node any more and an isolation
-- finds every execution the node held without reading every Workspace.
-- Rows written before this migration take node_id from their body
-- (store.backfillRuntimeNodes runs in the same transaction).
ALTER TABLE nodes ADD COLUMN draining BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspace_runtime ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
CREATE INDEX workspace_runtime_node ON workspace_runtime (node_id);
