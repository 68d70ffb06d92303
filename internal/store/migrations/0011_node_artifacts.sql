-- What each node's artifact cache holds, as the node last reported it in
-- its observation (GetTemplateDelivery reads it, and never asks a node).
--
-- node_artifacts holds one row per artifact a node holds complete
-- (complete = 1, delivered_bytes = total_bytes) or is fetching now
-- (complete = 0, total_bytes 0 while the node does not know the size).
-- started_at is when ctrl first saw the artifact arriving on the node, in
-- Unix nanos on ctrl's clock, and 0 for one first reported complete.
-- ctrl rewrites a node's rows only when its report changes.
CREATE TABLE node_artifacts (
    node_id          TEXT NOT NULL,
    digest           TEXT NOT NULL,
    complete         BIGINT NOT NULL DEFAULT 0,
    delivered_bytes  BIGINT NOT NULL DEFAULT 0,
    total_bytes      BIGINT NOT NULL DEFAULT 0,
    started_at       BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (node_id, digest)
);
CREATE INDEX node_artifacts_digest ON node_artifacts (digest, complete, node_id);
