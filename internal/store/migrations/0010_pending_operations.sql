-- Which nodes have operations waiting to be sent: one query a second for
-- the whole fleet (ctrl's operation poll), instead of one per session.
CREATE INDEX node_operations_pending_nodes ON node_operations (state, node_id);
