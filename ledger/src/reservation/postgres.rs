//! Reserve and settle on Postgres as one statement each.
//!
//! Every request of an account updates that account's row, so under load the row's
//! lock is the ledger's throughput: transactions queue on it, each holding it from its
//! `UPDATE accounts` to its commit. As explicit transactions (BEGIN, three statements,
//! COMMIT) the lock spans three client round trips plus the commit's WAL flush; as one
//! statement whose data-modifying CTEs update the account, insert the reservation and
//! append the journal row, it spans the statement's own execution and the flush. The
//! statements do exactly what the transactions in `store.rs` do (SQLite keeps those:
//! it has no data-modifying CTEs), and the same tests run against both.

use sqlx::Row;

use crate::error::LedgerError;
use crate::ledger::Ledger;

/// What a one-statement settle changed.
pub(super) struct Settled {
    pub amount: i64,
    pub charged: i64,
    pub uncollected: i64,
}

impl Ledger {
    /// Reserves `estimate` on `account_id`; `None` when the account cannot cover it (or
    /// does not exist): nothing was written then.
    pub(super) async fn reserve_pg(
        &self,
        account_id: i64,
        estimate: i64,
        request_id: &str,
        now: i64,
        expires: i64,
    ) -> Result<Option<i64>, LedgerError> {
        let id: Option<i64> = sqlx::query_scalar(
            "WITH a AS ( \
               UPDATE accounts SET reserved_nanos = reserved_nanos + $2 \
               WHERE id = $1 AND balance_nanos - reserved_nanos >= $2 \
               RETURNING balance_nanos, reserved_nanos), \
             r AS ( \
               INSERT INTO reservations (account_id, request_id, amount_nanos, state, created_at_ms, expires_at_ms) \
               SELECT $1, $3, $2, 'open', $4, $5 FROM a RETURNING id), \
             j AS ( \
               INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, \
                 balance_after, reserved_after, uncollected_nanos, reservation_id, request_id, at_ms) \
               SELECT $1, 'reserve', $2, 0, $2, a.balance_nanos, a.reserved_nanos, 0, r.id, $3, $4 FROM a, r) \
             SELECT id FROM r",
        )
        .bind(account_id)
        .bind(estimate)
        .bind(request_id)
        .bind(now)
        .bind(expires)
        .fetch_optional(&self.inner.writer)
        .await?;
        Ok(id)
    }

    /// Settles open reservation `id` with its usage (input tokens, output tokens, web
    /// searches); `None` when it is not open (settled, released or expired already):
    /// nothing was written then.
    pub(super) async fn settle_pg(
        &self,
        id: i64,
        charge: i64,
        [input_tokens, output_tokens, web_searches]: [i64; 3],
        upstream: Option<&str>,
        now: i64,
    ) -> Result<Option<Settled>, LedgerError> {
        let row = sqlx::query(
            "WITH r AS ( \
               UPDATE reservations SET state = 'settled', \
                 charged_nanos = CASE WHEN $2 < amount_nanos THEN $2 ELSE amount_nanos END, \
                 uncollected_nanos = CASE WHEN $2 > amount_nanos THEN $2 - amount_nanos ELSE 0 END, \
                 input_tokens = $3, output_tokens = $4, upstream = $5, closed_at_ms = $6, web_searches = $7 \
               WHERE id = $1 AND state = 'open' \
               RETURNING account_id, amount_nanos, charged_nanos, uncollected_nanos, request_id), \
             a AS ( \
               UPDATE accounts SET balance_nanos = balance_nanos - r.charged_nanos, \
                 reserved_nanos = reserved_nanos - r.amount_nanos \
               FROM r WHERE accounts.id = r.account_id \
               RETURNING accounts.balance_nanos, accounts.reserved_nanos), \
             j AS ( \
               INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, \
                 balance_after, reserved_after, uncollected_nanos, reservation_id, request_id, at_ms) \
               SELECT r.account_id, 'settle', r.charged_nanos, -r.charged_nanos, -r.amount_nanos, \
                 a.balance_nanos, a.reserved_nanos, r.uncollected_nanos, $1, r.request_id, $6 FROM r, a) \
             SELECT amount_nanos, charged_nanos, uncollected_nanos FROM r",
        )
        .bind(id)
        .bind(charge)
        .bind(input_tokens)
        .bind(output_tokens)
        .bind(upstream)
        .bind(now)
        .bind(web_searches)
        .fetch_optional(&self.inner.writer)
        .await?;
        row.map(|r| Ok(Settled { amount: r.try_get(0)?, charged: r.try_get(1)?, uncollected: r.try_get(2)? }))
            .transpose()
    }
}
