-- sluice ledger schema v3 (postgres): key ids and revocation (docs/design.md §3.4), and
-- the change log that carries top-ups and key changes to every gateway within 1 s
-- (docs/design.md §5a; ledger/src/notify.rs). Keep in step with ../sqlite/0003_keys.sql.

-- A stable, short id per key (what `admin key list` shows and `admin key revoke` takes);
-- existing keys are numbered by this statement.
ALTER TABLE api_keys ADD COLUMN id BIGINT GENERATED ALWAYS AS IDENTITY;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_id_unique UNIQUE (id);
-- Set once by `admin key revoke`; a revoked key authenticates nobody.
ALTER TABLE api_keys ADD COLUMN revoked_at_ms BIGINT;
CREATE INDEX api_keys_by_account ON api_keys (account_id, id);

-- The last change number. Every change takes it with an UPDATE, so changes commit in the
-- order of their numbers and a reader that has seen number N has seen every change <= N.
CREATE TABLE ledger_change_seq (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq BIGINT NOT NULL
);
INSERT INTO ledger_change_seq (one, seq) VALUES (1, 0);

-- One row per top-up (key_hash NULL) or key created or revoked; only the most recent
-- rows are kept (a reader that fell further behind starts over).
CREATE TABLE ledger_changes (
    seq BIGINT PRIMARY KEY,
    account_id BIGINT NOT NULL,
    key_hash TEXT,
    at_ms BIGINT NOT NULL
);
