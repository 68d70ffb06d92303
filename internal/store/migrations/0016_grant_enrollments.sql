-- The nodes a grant enrolled, a row each (issue 15).
--
-- A grant's body listed them (enrolled_node_ids), so every enrollment
-- rewrote the whole list under the grant's row lock: a reusable grant that
-- enrolled a fleet of 10,000 nodes was rewritten with 10,000 ids for the
-- last of them, and enrolling the fleet cost time quadratic in its size.
-- An enrollment is now a row, a grant's body no longer lists them, and
-- reading a grant reads its rows (seq keeps the order they enrolled in).
-- The migration's Go step moves the ids of existing bodies here.
CREATE TABLE grant_enrollments (
    grant_id TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    node_id  TEXT NOT NULL,
    PRIMARY KEY (grant_id, seq)
);
