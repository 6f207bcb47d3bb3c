-- sluice ledger schema v7 (postgres): route rollups per inbound API (docs/design.md §5, §12).
-- Keep in step with ../sqlite/0007_route_api.sql.
--
-- A route's minute is now one row per inbound API that served it (`chat`, `completions`,
-- `embeddings`, `messages`, `responses`), and the route's counters are the sum of those
-- rows. The rows written before were all counted as `chat`; new rows always name their
-- API, so the column keeps no default.
--
-- The key is (route, minute, api) rather than (route, api, minute): every reader takes
-- a range of minutes of some routes and sums their APIs, which is then one contiguous
-- range of the key per route.
ALTER TABLE route_minutes ADD COLUMN api TEXT NOT NULL DEFAULT 'chat';
ALTER TABLE route_minutes ALTER COLUMN api DROP DEFAULT;
ALTER TABLE route_minutes DROP CONSTRAINT route_minutes_pkey;
ALTER TABLE route_minutes ADD CONSTRAINT route_minutes_pkey PRIMARY KEY (route, minute, api);
