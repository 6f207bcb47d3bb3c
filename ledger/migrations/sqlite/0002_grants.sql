-- sluice ledger schema v2 (sqlite): balance grants (docs/design.md §5a).
-- Keep in step with ../postgres/0002_grants.sql. Nothing is rebuilt: one new table and
-- nullable journal columns.

-- A gateway process's hold on part of an account's available balance. While `open`,
-- `amount_nanos` is in the account's `reserved_nanos`; settlements take from it, and a
-- return (or the reaper, at `expires_at_ms`) gives the rest back.
CREATE TABLE grants (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    holder TEXT NOT NULL,
    amount_nanos BIGINT NOT NULL CHECK (amount_nanos >= 0),
    settled_nanos BIGINT NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('open', 'returned', 'expired')),
    created_at_ms BIGINT NOT NULL,
    renewed_at_ms BIGINT NOT NULL,
    valid_until_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    closed_at_ms BIGINT
);
CREATE INDEX grants_open_by_expiry ON grants (expires_at_ms) WHERE state = 'open';

-- Journal rows of grants: which grant, which hold of it (a settlement's idempotency key:
-- a batch retried after an unknown commit outcome inserts nothing twice), and what a
-- settlement used.
ALTER TABLE journal ADD COLUMN grant_id BIGINT REFERENCES grants (id);
ALTER TABLE journal ADD COLUMN hold_id BIGINT;
ALTER TABLE journal ADD COLUMN input_tokens BIGINT;
ALTER TABLE journal ADD COLUMN output_tokens BIGINT;
ALTER TABLE journal ADD COLUMN upstream TEXT;
CREATE UNIQUE INDEX journal_hold_once ON journal (grant_id, hold_id);
