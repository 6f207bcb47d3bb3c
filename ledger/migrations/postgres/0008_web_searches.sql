-- sluice ledger schema v8 (postgres): the web searches an answer ran, billed per search at the
-- candidate's `webSearch` price (docs/design.md §5), kept beside its tokens: on the
-- journal's settlement rows (balance grants, §5a) and on a settled reservation's row.
-- Keep in step with ../sqlite/0008_web_searches.sql.
--
-- NULL on the rows written before, as their tokens are NULL on the rows that have none.
ALTER TABLE journal ADD COLUMN web_searches BIGINT;
ALTER TABLE reservations ADD COLUMN web_searches BIGINT;
