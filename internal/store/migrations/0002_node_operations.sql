-- node_operations are the pieces of work commands hand to nodes. They are
-- rows, not messages held in memory, so whichever ctrl replica holds the
-- node's control session sends them, and a restart of ctrl or of the node
-- loses none: the node answers an operation it already applied from its own
-- record.
CREATE TABLE node_operations (
    operation_id  TEXT PRIMARY KEY,
    node_id       TEXT NOT NULL,
    command_id    TEXT NOT NULL,
    state         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    body          {{BYTES}} NOT NULL
);
CREATE INDEX node_operations_pending ON node_operations (node_id, state, created_at);
