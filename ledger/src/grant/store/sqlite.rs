//! The settlement batch on SQLite (docs/design.md §5a): one `BEGIN IMMEDIATE`
//! transaction on the one writer connection, the rows in multi-row inserts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use sqlx::{Any, Row, Transaction};

use super::Job;
use crate::error::LedgerError;
use crate::ledger::{Ledger, to_db};

/// Journal rows per INSERT (11 binds each).
const ROWS_PER_INSERT: usize = 500;

impl Ledger {
    /// [`Ledger::settle_batch`] on SQLite: one `BEGIN IMMEDIATE` transaction with
    /// multi-row inserts.
    pub(super) async fn settle_batch_sqlite(&self, jobs: &[Job]) -> Result<Vec<bool>, LedgerError> {
        let mut tx = self.begin_write().await?;
        let mut open: BTreeMap<i64, bool> = BTreeMap::new();
        for (id, account_id) in jobs.iter().map(|j| (j.grant_id, j.account_id)).collect::<BTreeSet<_>>() {
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM grants WHERE id = $1 AND account_id = $2")
                    .bind(id)
                    .bind(account_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some(state) = state else {
                tx.rollback().await?;
                return Err(LedgerError::UnknownGrant { grant_id: id, account_id });
            };
            open.insert(id, state == "open");
        }
        let applied: Vec<bool> = jobs.iter().map(|j| open.get(&j.grant_id).copied().unwrap_or(false)).collect();
        let rows: Vec<SettleRow<'_>> =
            jobs.iter().zip(&applied).map(|(job, &moves)| SettleRow::new(job, moves)).collect();
        let inserted = insert_rows(&mut tx, &rows).await?;
        let mut settled: BTreeMap<i64, i64> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.moves && inserted.contains(&(r.job.grant_id, r.job.hold_id))) {
            *settled.entry(row.job.grant_id).or_default() += row.amount;
        }
        for (id, total) in settled.into_iter().filter(|(_, t)| *t > 0) {
            sqlx::query(
                "UPDATE grants SET amount_nanos = amount_nanos - $2, settled_nanos = settled_nanos + $2, \
                 unposted_nanos = unposted_nanos + $2 WHERE id = $1",
            )
            .bind(id)
            .bind(total)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(applied)
    }
}

/// One settlement's journal row.
struct SettleRow<'a> {
    job: &'a Job,
    /// Whether its grant is open: `settle` (money moves), else `late_settle`.
    moves: bool,
    amount: i64,
    uncollected: i64,
}

impl<'a> SettleRow<'a> {
    fn new(job: &'a Job, moves: bool) -> Self {
        let (amount, uncollected) =
            if moves { (job.charged, job.uncollected) } else { (0, job.charged.saturating_add(job.uncollected)) };
        SettleRow { job, moves, amount, uncollected }
    }
}

/// Inserts `rows` (in statements of [`ROWS_PER_INSERT`]), skipping those already in the
/// journal; returns the `(grant_id, hold_id)` of those that went in.
async fn insert_rows(
    tx: &mut Transaction<'static, Any>,
    rows: &[SettleRow<'_>],
) -> Result<BTreeSet<(i64, i64)>, LedgerError> {
    let mut inserted = BTreeSet::new();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = placeholders(chunk.len());
        let mut q = sqlx::query(&sql);
        for r in chunk {
            q = q
                .bind(r.job.account_id)
                .bind(if r.moves { "settle" } else { "late_settle" })
                .bind(r.amount)
                .bind(r.uncollected)
                .bind(r.job.request_id.clone())
                .bind(r.job.at_ms)
                .bind(r.job.grant_id)
                .bind(r.job.hold_id)
                .bind(to_db("input tokens", r.job.usage.input_tokens)?)
                .bind(to_db("output tokens", r.job.usage.output_tokens)?)
                .bind(r.job.usage.upstream.clone())
                .bind(to_db("web searches", r.job.usage.web_searches)?);
        }
        for row in q.fetch_all(&mut **tx).await? {
            inserted.insert((row.try_get::<i64, _>(0)?, row.try_get::<i64, _>(1)?));
        }
    }
    Ok(inserted)
}

/// Values per settlement row of [`placeholders`].
const SETTLE_COLUMNS: usize = 12;

/// The INSERT of `n` settlement rows, [`SETTLE_COLUMNS`] values each, `RETURNING
/// grant_id, hold_id`. The account row is not touched: the balance and reserved deltas
/// are 0 and there are no "after" values (docs/design.md §5a).
fn placeholders(n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO journal (account_id, kind, amount_nanos, uncollected_nanos, request_id, at_ms, grant_id, hold_id, \
         input_tokens, output_tokens, upstream, web_searches, balance_delta, reserved_delta) VALUES ",
    );
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for c in 0..SETTLE_COLUMNS {
            // Writing to a `String` cannot fail.
            let _ = write!(sql, "${}, ", i * SETTLE_COLUMNS + c + 1);
        }
        sql.push_str("0, 0)");
    }
    sql.push_str(" ON CONFLICT DO NOTHING RETURNING grant_id, hold_id");
    sql
}
