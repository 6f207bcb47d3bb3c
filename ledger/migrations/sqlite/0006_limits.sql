-- sluice ledger schema v6 (sqlite): limits on keys and accounts, and the leases that
-- share each limit's window among gateway processes (docs/design.md §5b).
-- Keep in step with ../postgres/0006_limits.sql. Nothing is rebuilt: two new tables.

-- The limits of one key or account; a NULL column is no limit. A change is recorded in
-- ledger_changes (the key's hash, or the account alone), so every gateway reloads it
-- within 1 s.
CREATE TABLE limits (
    subject TEXT NOT NULL CHECK (subject IN ('key', 'account')),
    subject_id BIGINT NOT NULL,
    rpm BIGINT CHECK (rpm > 0),
    tpm BIGINT CHECK (tpm > 0),
    tpd BIGINT CHECK (tpd > 0),
    concurrency BIGINT CHECK (concurrency > 0),
    daily_spend_nanos BIGINT CHECK (daily_spend_nanos >= 0),
    monthly_spend_nanos BIGINT CHECK (monthly_spend_nanos >= 0),
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (subject, subject_id)
);

-- One gateway process's slice of one limit's window. The window's use is the sum of its
-- rows' `amount`: while a lease is open (`expires_at_ms` set) all of it; a return, or
-- the reaper at `expires_at_ms`, sets it to `used`, what the holder last reported it
-- had used. A take locks the subject's `limits` row, so takes of many processes on one
-- subject are serial and the sum never passes the limit.
CREATE TABLE limit_leases (
    subject TEXT NOT NULL,
    subject_id BIGINT NOT NULL,
    meter TEXT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    window_end_ms BIGINT NOT NULL,
    holder TEXT NOT NULL,
    amount BIGINT NOT NULL CHECK (amount >= 0),
    used BIGINT NOT NULL CHECK (used >= 0),
    expires_at_ms BIGINT,
    PRIMARY KEY (subject, subject_id, meter, window_start_ms, holder)
);
CREATE INDEX limit_leases_open_by_expiry ON limit_leases (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX limit_leases_by_window_end ON limit_leases (window_end_ms);
