-- sluice ledger schema v7 (sqlite): route rollups per inbound API (docs/design.md §5, §12).
-- Keep in step with ../postgres/0007_route_api.sql.
--
-- A route's minute is now one row per inbound API that served it (`chat`, `completions`,
-- `embeddings`, `messages`, `responses`), and the route's counters are the sum of those
-- rows. The rows written before were all counted as `chat`; new rows always name their
-- API, so the column has no default. SQLite cannot change a primary key in place, so
-- the table is copied into a new one (it has no other index).
--
-- The key is (route, minute, api) rather than (route, api, minute): every reader takes
-- a range of minutes of some routes and sums their APIs, which is then one contiguous
-- range of the key per route.
CREATE TABLE route_minutes_v7 (
    route TEXT NOT NULL,
    api TEXT NOT NULL,
    minute BIGINT NOT NULL,
    total BIGINT NOT NULL DEFAULT 0,
    bad BIGINT NOT NULL DEFAULT 0,
    failovers BIGINT NOT NULL DEFAULT 0,
    lat_0 BIGINT NOT NULL DEFAULT 0,
    lat_1 BIGINT NOT NULL DEFAULT 0,
    lat_2 BIGINT NOT NULL DEFAULT 0,
    lat_3 BIGINT NOT NULL DEFAULT 0,
    lat_4 BIGINT NOT NULL DEFAULT 0,
    lat_5 BIGINT NOT NULL DEFAULT 0,
    lat_6 BIGINT NOT NULL DEFAULT 0,
    lat_7 BIGINT NOT NULL DEFAULT 0,
    lat_8 BIGINT NOT NULL DEFAULT 0,
    lat_9 BIGINT NOT NULL DEFAULT 0,
    lat_10 BIGINT NOT NULL DEFAULT 0,
    lat_11 BIGINT NOT NULL DEFAULT 0,
    lat_12 BIGINT NOT NULL DEFAULT 0,
    lat_13 BIGINT NOT NULL DEFAULT 0,
    lat_14 BIGINT NOT NULL DEFAULT 0,
    lat_15 BIGINT NOT NULL DEFAULT 0,
    lat_16 BIGINT NOT NULL DEFAULT 0,
    lat_17 BIGINT NOT NULL DEFAULT 0,
    lat_18 BIGINT NOT NULL DEFAULT 0,
    lat_19 BIGINT NOT NULL DEFAULT 0,
    lat_20 BIGINT NOT NULL DEFAULT 0,
    lat_21 BIGINT NOT NULL DEFAULT 0,
    lat_22 BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (route, minute, api)
);
INSERT INTO route_minutes_v7 (route, api, minute, total, bad, failovers, lat_0, lat_1, lat_2, lat_3, lat_4, lat_5,
                              lat_6, lat_7, lat_8, lat_9, lat_10, lat_11, lat_12, lat_13, lat_14, lat_15, lat_16,
                              lat_17, lat_18, lat_19, lat_20, lat_21, lat_22)
    SELECT route, 'chat', minute, total, bad, failovers, lat_0, lat_1, lat_2, lat_3, lat_4, lat_5, lat_6, lat_7, lat_8,
           lat_9, lat_10, lat_11, lat_12, lat_13, lat_14, lat_15, lat_16, lat_17, lat_18, lat_19, lat_20, lat_21, lat_22
    FROM route_minutes;
DROP TABLE route_minutes;
ALTER TABLE route_minutes_v7 RENAME TO route_minutes;
