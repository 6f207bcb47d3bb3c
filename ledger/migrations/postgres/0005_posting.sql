-- sluice ledger schema v5 (postgres): settlements go to the grant, not the account row
-- (docs/design.md §5a). Keep in step with ../sqlite/0005_posting.sql.
--
-- A settlement batch updates only the rows of the grants it settles, so gateways on one
-- account no longer take turns on the account's row. What a grant has settled but not
-- yet posted to its account is `unposted_nanos`; it is still inside the account's
-- `balance_nanos` and `reserved_nanos` (so balance − reserved, what may be reserved, is
-- exact at every instant) and a `post` journal row moves it out of both when the grant
-- renews (at least every half validity while in use), is returned or expires.

ALTER TABLE grants ADD COLUMN unposted_nanos BIGINT NOT NULL DEFAULT 0;
-- A closed grant has posted everything: whatever closes one posts it first.
ALTER TABLE grants ADD CONSTRAINT grants_unposted_ok
    CHECK (unposted_nanos >= 0 AND (state = 'open' OR unposted_nanos = 0));
-- The open grants of an account: what it has unposted, what they hold.
CREATE INDEX grants_open_by_account ON grants (account_id) WHERE state = 'open';

-- A settlement on a grant does not touch (or lock) the account row, so it cannot say
-- what the row held after it: its balance_after and reserved_after are NULL. Every row
-- that does change the account row (open, topup, reserve, release, expire, post, and the
-- per-request settle) still carries them.
ALTER TABLE journal ALTER COLUMN balance_after DROP NOT NULL;
ALTER TABLE journal ALTER COLUMN reserved_after DROP NOT NULL;
ALTER TABLE journal ADD CONSTRAINT journal_after_both
    CHECK ((balance_after IS NULL) = (reserved_after IS NULL));
ALTER TABLE journal DROP CONSTRAINT journal_kind_check;
ALTER TABLE journal ADD CONSTRAINT journal_kind_check
    CHECK (kind IN ('open', 'topup', 'reserve', 'settle', 'release', 'expire', 'late_settle', 'post'));
