-- sluice ledger schema v5 (sqlite): settlements go to the grant, not the account row
-- (docs/design.md §5a). Keep in step with ../postgres/0005_posting.sql.
--
-- A settlement batch updates only the rows of the grants it settles. What a grant has
-- settled but not yet posted to its account is `unposted_nanos`; it is still inside the
-- account's `balance_nanos` and `reserved_nanos` (so balance − reserved, what may be
-- reserved, is exact at every instant) and a `post` journal row moves it out of both
-- when the grant renews (at least every half validity while in use), is returned or
-- expires.

-- A closed grant has posted everything: whatever closes one posts it first.
ALTER TABLE grants ADD COLUMN unposted_nanos BIGINT NOT NULL DEFAULT 0
    CHECK (unposted_nanos >= 0 AND (state = 'open' OR unposted_nanos = 0));
-- The open grants of an account: what it has unposted, what they hold.
CREATE INDEX grants_open_by_account ON grants (account_id) WHERE state = 'open';

-- A settlement on a grant does not touch the account row, so it cannot say what the row
-- held after it: its balance_after and reserved_after are NULL. SQLite cannot drop a NOT
-- NULL (nor change a CHECK) in place, so the journal is copied into a new table.
CREATE TABLE journal_v5 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    kind TEXT NOT NULL CHECK (kind IN ('open', 'topup', 'reserve', 'settle', 'release', 'expire', 'late_settle', 'post')),
    amount_nanos BIGINT NOT NULL,
    balance_delta BIGINT NOT NULL,
    reserved_delta BIGINT NOT NULL,
    balance_after BIGINT,
    reserved_after BIGINT,
    uncollected_nanos BIGINT NOT NULL DEFAULT 0,
    reservation_id BIGINT REFERENCES reservations (id),
    request_id TEXT,
    at_ms BIGINT NOT NULL,
    grant_id BIGINT REFERENCES grants (id),
    hold_id BIGINT,
    input_tokens BIGINT,
    output_tokens BIGINT,
    upstream TEXT,
    CONSTRAINT journal_after_both CHECK ((balance_after IS NULL) = (reserved_after IS NULL))
);
INSERT INTO journal_v5 (id, account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after,
                        reserved_after, uncollected_nanos, reservation_id, request_id, at_ms, grant_id, hold_id,
                        input_tokens, output_tokens, upstream)
    SELECT id, account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, reserved_after,
           uncollected_nanos, reservation_id, request_id, at_ms, grant_id, hold_id, input_tokens, output_tokens,
           upstream
    FROM journal ORDER BY id;
DROP TABLE journal;
ALTER TABLE journal_v5 RENAME TO journal;
CREATE INDEX journal_by_account ON journal (account_id, id);
CREATE UNIQUE INDEX journal_hold_once ON journal (grant_id, hold_id);

CREATE TRIGGER journal_no_update BEFORE UPDATE ON journal
BEGIN
    SELECT RAISE(ABORT, 'journal is append-only');
END;

CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal
BEGIN
    SELECT RAISE(ABORT, 'journal is append-only');
END;
