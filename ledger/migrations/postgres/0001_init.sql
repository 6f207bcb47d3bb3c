-- sluice ledger schema v1 (postgres). Money is BIGINT nanodollars; times are unix milliseconds.
-- Keep in step with ../sqlite/0001_init.sql: the Rust code runs the same statements on both.

CREATE TABLE accounts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    balance_nanos BIGINT NOT NULL,
    reserved_nanos BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    -- The overdraft invariant, enforced a second time by the database itself.
    CONSTRAINT accounts_no_overdraft CHECK (reserved_nanos >= 0 AND balance_nanos >= reserved_nanos)
);

CREATE TABLE api_keys (
    key_hash TEXT PRIMARY KEY,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    key_prefix TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE reservations (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    request_id TEXT NOT NULL,
    amount_nanos BIGINT NOT NULL CHECK (amount_nanos >= 0),
    state TEXT NOT NULL CHECK (state IN ('open', 'settled', 'released', 'expired')),
    charged_nanos BIGINT,
    uncollected_nanos BIGINT,
    input_tokens BIGINT,
    output_tokens BIGINT,
    upstream TEXT,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    closed_at_ms BIGINT
);
CREATE INDEX reservations_open_by_expiry ON reservations (expires_at_ms) WHERE state = 'open';

-- Append-only: one row per change of money. balance_delta/reserved_delta sum to the
-- account's current balance/reserved (see Ledger::journal_verify).
CREATE TABLE journal (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    kind TEXT NOT NULL CHECK (kind IN ('open', 'topup', 'reserve', 'settle', 'release', 'expire', 'late_settle')),
    amount_nanos BIGINT NOT NULL,
    balance_delta BIGINT NOT NULL,
    reserved_delta BIGINT NOT NULL,
    balance_after BIGINT NOT NULL,
    reserved_after BIGINT NOT NULL,
    uncollected_nanos BIGINT NOT NULL DEFAULT 0,
    reservation_id BIGINT REFERENCES reservations (id),
    request_id TEXT,
    at_ms BIGINT NOT NULL
);
CREATE INDEX journal_by_account ON journal (account_id, id);

CREATE TABLE route_minutes (
    route TEXT NOT NULL,
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
    PRIMARY KEY (route, minute)
);

CREATE TABLE upstream_minutes (
    upstream TEXT NOT NULL,
    minute BIGINT NOT NULL,
    fb_0 BIGINT NOT NULL DEFAULT 0,
    fb_1 BIGINT NOT NULL DEFAULT 0,
    fb_2 BIGINT NOT NULL DEFAULT 0,
    fb_3 BIGINT NOT NULL DEFAULT 0,
    fb_4 BIGINT NOT NULL DEFAULT 0,
    fb_5 BIGINT NOT NULL DEFAULT 0,
    fb_6 BIGINT NOT NULL DEFAULT 0,
    fb_7 BIGINT NOT NULL DEFAULT 0,
    fb_8 BIGINT NOT NULL DEFAULT 0,
    fb_9 BIGINT NOT NULL DEFAULT 0,
    fb_10 BIGINT NOT NULL DEFAULT 0,
    fb_11 BIGINT NOT NULL DEFAULT 0,
    fb_12 BIGINT NOT NULL DEFAULT 0,
    fb_13 BIGINT NOT NULL DEFAULT 0,
    fb_14 BIGINT NOT NULL DEFAULT 0,
    fb_15 BIGINT NOT NULL DEFAULT 0,
    fb_16 BIGINT NOT NULL DEFAULT 0,
    fb_17 BIGINT NOT NULL DEFAULT 0,
    fb_18 BIGINT NOT NULL DEFAULT 0,
    fb_19 BIGINT NOT NULL DEFAULT 0,
    fb_20 BIGINT NOT NULL DEFAULT 0,
    fb_21 BIGINT NOT NULL DEFAULT 0,
    fb_22 BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (upstream, minute)
);

CREATE TABLE upstream_outcomes (
    upstream TEXT NOT NULL,
    minute BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (upstream, minute, outcome)
);

CREATE TABLE heartbeats (
    gateway_id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    upstreams TEXT NOT NULL
);

CREATE FUNCTION sluice_journal_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'journal is append-only';
END;
$$;

CREATE TRIGGER journal_append_only BEFORE UPDATE OR DELETE ON journal
    FOR EACH ROW EXECUTE FUNCTION sluice_journal_append_only();
