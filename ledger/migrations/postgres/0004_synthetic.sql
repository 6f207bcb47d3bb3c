-- sluice ledger schema v4 (postgres): synthetic checks (docs/design.md §10). Keep in step with
-- ../sqlite/0004_synthetic.sql: the Rust code runs the same statements on both.

-- One row per synthetic check of one candidate, written by the gateway that ran it
-- (Ledger::record_synthetic) and read by the status page; rows older than 90 days are
-- pruned (Ledger::prune_synthetic). route and upstream are the rollups' keys
-- (route_minutes.route, upstream_outcomes.upstream). The cost is also journalled on the
-- account sluice-synthetic.
CREATE TABLE synthetic_checks (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route TEXT NOT NULL,
    upstream TEXT NOT NULL,
    gateway_id TEXT NOT NULL,
    -- When the check finished, unix milliseconds.
    at_ms BIGINT NOT NULL,
    -- 'ok', or the attempt's outcome label (http_5xx, connect, first_byte_timeout, ...).
    outcome TEXT NOT NULL,
    -- Time to the first content of the answer; NULL when none came.
    first_byte_ms BIGINT,
    cost_nanos BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX synthetic_checks_by_candidate ON synthetic_checks (route, upstream, at_ms);
