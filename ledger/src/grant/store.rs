//! The database side of grants (docs/design.md §5a), one SQL text for both databases:
//! take (open or grow a grant, or only extend its validity), close (return or expire),
//! the reaper, and a settlement batch.
//!
//! Lock order, everywhere: the account row first, then the grant row, so that takes,
//! returns, reapers and settlement batches of many processes never deadlock on Postgres.
//! On SQLite the write transaction (`BEGIN IMMEDIATE`) holds the only lock there is.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{Any, Row, Transaction};

use super::writer::Job;
use crate::error::LedgerError;
use crate::ledger::{Ledger, to_db};

/// Grants the reaper closes per query (it loops until none are left).
const REAP_BATCH: i64 = 500;
/// Journal rows per INSERT of a settlement batch (15 binds each).
const ROWS_PER_INSERT: usize = 500;

/// A request to open or grow a grant.
#[derive(Clone, Debug)]
pub(crate) struct Take<'a> {
    pub account_id: i64,
    /// The grant to grow; `None` opens a new one.
    pub grant_id: Option<i64>,
    pub holder: &'a str,
    /// Refused unless at least this much is available (0: a validity renewal that
    /// takes what it can, possibly nothing).
    pub need: i64,
    /// The size wanted: taken when half of what is available covers it; otherwise
    /// half of what is available, but never less than `need`.
    pub target: i64,
    pub now_ms: i64,
    pub valid_until_ms: i64,
    pub expires_at_ms: i64,
}

/// What a take did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// `amount` (maybe 0) more is held in grant `grant_id`; `free` is what the account
    /// has available after it.
    Took {
        grant_id: i64,
        amount: i64,
        free: i64,
    },
    /// Less than `need` is available: nothing was written.
    Short { free: i64 },
    /// The grant to grow is no longer open (a reaper expired it): nothing was written.
    GrantGone,
}

/// How much a take moves into the grant, given what the account has `free`.
pub(crate) fn take_size(free: i64, need: i64, target: i64) -> Option<i64> {
    if free < need {
        return None;
    }
    let half = free / 2;
    Some(if half >= target {
        target
    } else {
        half.max(need)
    })
}

impl Ledger {
    /// Locks account `id` for the transaction (the first lock it takes) and reads its
    /// balance and reserved amount.
    async fn lock_account(
        tx: &mut Transaction<'static, Any>,
        postgres: bool,
        id: i64,
    ) -> Result<Option<(i64, i64)>, LedgerError> {
        let sql = if postgres {
            "SELECT balance_nanos, reserved_nanos FROM accounts WHERE id = $1 FOR UPDATE"
        } else {
            "SELECT balance_nanos, reserved_nanos FROM accounts WHERE id = $1"
        };
        let row = sqlx::query(sql).bind(id).fetch_optional(&mut **tx).await?;
        Ok(match row {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
            None => None,
        })
    }

    /// Opens or grows a grant in one transaction (docs/design.md §5a), journalled as
    /// `reserve` with the grant's id when money moves.
    pub(crate) async fn take_grant(&self, t: &Take<'_>) -> Result<Taken, LedgerError> {
        let pg = self.is_postgres();
        let mut tx = self.begin_write().await?;
        let Some((balance, reserved)) = Self::lock_account(&mut tx, pg, t.account_id).await? else {
            tx.rollback().await?;
            return Err(LedgerError::UnknownAccountId(t.account_id));
        };
        let free = balance - reserved;
        let Some(amount) = take_size(free, t.need, t.target) else {
            tx.rollback().await?;
            return Ok(Taken::Short { free });
        };
        let grant_id = match t.grant_id {
            Some(id) => {
                let grown: Option<i64> = sqlx::query_scalar(
                    "UPDATE grants SET amount_nanos = amount_nanos + $2, renewed_at_ms = $3, \
                     valid_until_ms = $4, expires_at_ms = $5 WHERE id = $1 AND state = 'open' RETURNING id",
                )
                .bind(id)
                .bind(amount)
                .bind(t.now_ms)
                .bind(t.valid_until_ms)
                .bind(t.expires_at_ms)
                .fetch_optional(&mut *tx)
                .await?;
                if grown.is_none() {
                    tx.rollback().await?;
                    return Ok(Taken::GrantGone);
                }
                id
            }
            None => {
                sqlx::query_scalar(
                    "INSERT INTO grants (account_id, holder, amount_nanos, settled_nanos, state, created_at_ms, \
                     renewed_at_ms, valid_until_ms, expires_at_ms) VALUES ($1, $2, $3, 0, 'open', $4, $4, $5, $6) RETURNING id",
                )
                .bind(t.account_id)
                .bind(t.holder)
                .bind(amount)
                .bind(t.now_ms)
                .bind(t.valid_until_ms)
                .bind(t.expires_at_ms)
                .fetch_one(&mut *tx)
                .await?
            }
        };
        if amount > 0 {
            sqlx::query("UPDATE accounts SET reserved_nanos = reserved_nanos + $2 WHERE id = $1")
                .bind(t.account_id)
                .bind(amount)
                .execute(&mut *tx)
                .await?;
            let row = GrantRow {
                account_id: t.account_id,
                kind: "reserve",
                amount,
                balance_delta: 0,
                reserved_delta: amount,
                balance_after: balance,
                reserved_after: reserved + amount,
                grant_id,
                at_ms: t.now_ms,
            };
            row.append(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(Taken::Took {
            grant_id,
            amount,
            free: free - amount,
        })
    }

    /// Gives grant `grant_id` back: its remaining amount leaves the account's
    /// `reserved`, journalled as `release` (a return) or `expire` (the reaper). With
    /// `due_by`, only if its `expires_at_ms` is at or before that. Returns whether it was
    /// open (and so closed now).
    pub(crate) async fn close_grant(
        &self,
        account_id: i64,
        grant_id: i64,
        expire: bool,
        now_ms: i64,
        due_by: Option<i64>,
    ) -> Result<bool, LedgerError> {
        let pg = self.is_postgres();
        let mut tx = self.begin_write().await?;
        let Some((balance, reserved)) = Self::lock_account(&mut tx, pg, account_id).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let state = if expire { "expired" } else { "returned" };
        let amount: Option<i64> = sqlx::query_scalar(
            "UPDATE grants SET state = $2, closed_at_ms = $3 WHERE id = $1 AND account_id = $4 AND state = 'open' \
             AND expires_at_ms <= $5 RETURNING amount_nanos",
        )
        .bind(grant_id)
        .bind(state)
        .bind(now_ms)
        .bind(account_id)
        .bind(due_by.unwrap_or(i64::MAX))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(amount) = amount else {
            tx.rollback().await?;
            return Ok(false);
        };
        sqlx::query("UPDATE accounts SET reserved_nanos = reserved_nanos - $2 WHERE id = $1")
            .bind(account_id)
            .bind(amount)
            .execute(&mut *tx)
            .await?;
        let kind = if expire { "expire" } else { "release" };
        let row = GrantRow {
            account_id,
            kind,
            amount,
            balance_delta: 0,
            reserved_delta: -amount,
            balance_after: balance,
            reserved_after: reserved - amount,
            grant_id,
            at_ms: now_ms,
        };
        row.append(&mut tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Expires every open grant whose `expires_at_ms` is at or before `now_ms` (a killed
    /// process's grants). Returns how many.
    pub(crate) async fn reap_grants(&self, now_ms: i64) -> Result<u64, LedgerError> {
        let mut reaped = 0;
        loop {
            let due = sqlx::query("SELECT id, account_id FROM grants WHERE state = 'open' AND expires_at_ms <= $1 ORDER BY id LIMIT $2")
                .bind(now_ms)
                .bind(REAP_BATCH)
                .fetch_all(&self.inner.reader)
                .await?;
            let batch_len = due.len();
            for row in due {
                let (id, account_id): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                if self
                    .close_grant(account_id, id, true, now_ms, Some(now_ms))
                    .await?
                {
                    reaped += 1;
                }
            }
            if batch_len < usize::try_from(REAP_BATCH).unwrap_or(usize::MAX) {
                break;
            }
        }
        if reaped > 0 {
            tracing::info!(
                reaped,
                "expired grants of processes that did not return them"
            );
        }
        Ok(reaped)
    }

    /// The open grants of account `account_id`: how many, and what they hold of its
    /// `reserved` (the rest is held by per-request reservations).
    pub async fn granted(&self, account_id: i64) -> Result<(u64, i64), LedgerError> {
        let row = sqlx::query(
            "SELECT COUNT(*), CAST(COALESCE(SUM(amount_nanos), 0) AS BIGINT) FROM grants WHERE account_id = $1 AND state = 'open'",
        )
        .bind(account_id)
        .fetch_one(&self.inner.reader)
        .await?;
        let (n, held): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        Ok((u64::try_from(n).unwrap_or(0), held))
    }

    /// Number of open grants (all accounts, all processes).
    pub async fn open_grants(&self) -> Result<u64, LedgerError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM grants WHERE state = 'open'")
            .fetch_one(&self.inner.reader)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Commits one settlement batch in one transaction: one journal row per settlement
    /// (`settle`, or `late_settle` when its grant is no longer open: nothing moves, the
    /// charge is uncollected), each account row and each grant row updated once.
    /// Idempotent: a row whose `(grant_id, hold_id)` is in the journal already (a batch
    /// retried after an unknown commit outcome) is not inserted, and only inserted rows
    /// move money. Returns, per job, whether its grant was open (money moved).
    pub(crate) async fn settle_batch(&self, jobs: &[Job]) -> Result<Vec<bool>, LedgerError> {
        if self.is_postgres() {
            self.settle_batch_postgres(jobs).await
        } else {
            self.settle_batch_sqlite(jobs, false).await
        }
    }

    /// [`Ledger::settle_batch`] on SQLite: one `BEGIN IMMEDIATE` transaction with a
    /// multi-row insert, or, `row_by_row`, an insert a row (after a multi-row insert
    /// found some rows there already) with the "after" values recomputed.
    async fn settle_batch_sqlite(&self, jobs: &[Job], row_by_row: bool) -> Result<Vec<bool>, LedgerError> {
        let mut tx = self.begin_write().await?;
        let mut accounts: BTreeMap<i64, (i64, i64, bool)> = BTreeMap::new();
        for id in jobs.iter().map(|j| j.account_id).collect::<BTreeSet<_>>() {
            let (b, r) = Self::lock_account(&mut tx, false, id)
                .await?
                .ok_or(LedgerError::UnknownAccountId(id))?;
            accounts.insert(id, (b, r, false));
        }
        let mut open: BTreeMap<i64, (bool, i64)> = BTreeMap::new();
        for id in jobs.iter().map(|j| j.grant_id).collect::<BTreeSet<_>>() {
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM grants WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            open.insert(id, (state.as_deref() == Some("open"), 0));
        }
        let applied: Vec<bool> = jobs
            .iter()
            .map(|j| open.get(&j.grant_id).is_some_and(|g| g.0))
            .collect();
        // Rows with their "after" values, as if each is inserted in order.
        let mut rows = Vec::with_capacity(jobs.len());
        for (job, &moves) in jobs.iter().zip(&applied) {
            let Some(a) = accounts.get_mut(&job.account_id) else {
                continue;
            };
            let (kind, amount, uncollected) = if moves {
                a.0 -= job.charged;
                a.1 -= job.charged;
                ("settle", job.charged, job.uncollected)
            } else {
                (
                    "late_settle",
                    0,
                    job.charged.saturating_add(job.uncollected),
                )
            };
            rows.push(SettleRow {
                job,
                kind,
                amount,
                uncollected,
                balance_after: a.0,
                reserved_after: a.1,
            });
        }
        let inserted = if row_by_row {
            None
        } else {
            insert_rows(&mut tx, &rows).await?
        };
        let inserted = match inserted {
            Some(n) if n == rows.len() => true,
            // All there already: an earlier attempt of this batch committed.
            Some(0) => false,
            _ if !row_by_row => {
                tx.rollback().await?;
                return Box::pin(self.settle_batch_sqlite(jobs, true)).await;
            }
            _ => {
                // Row by row: recompute the "after" values from the rows that go in.
                for (id, (b, r, _)) in accounts.iter_mut() {
                    let (b0, r0) = Self::lock_account(&mut tx, false, *id)
                        .await?
                        .ok_or(LedgerError::UnknownAccountId(*id))?;
                    (*b, *r) = (b0, r0);
                }
                for row in &mut rows {
                    let Some(a) = accounts.get_mut(&row.job.account_id) else {
                        continue;
                    };
                    let moves = row.kind == "settle";
                    let (b, r) = if moves {
                        (a.0 - row.amount, a.1 - row.amount)
                    } else {
                        (a.0, a.1)
                    };
                    row.balance_after = b;
                    row.reserved_after = r;
                    if insert_rows(&mut tx, std::slice::from_ref(row)).await? == Some(1) {
                        (a.0, a.1, a.2) = (b, r, a.2 || moves);
                        if moves && let Some(g) = open.get_mut(&row.job.grant_id) {
                            g.1 += row.amount;
                        }
                    }
                }
                false
            }
        };
        if inserted {
            for row in &rows {
                if row.kind == "settle" {
                    if let Some(a) = accounts.get_mut(&row.job.account_id) {
                        a.2 = true;
                    }
                    if let Some(g) = open.get_mut(&row.job.grant_id) {
                        g.1 += row.amount;
                    }
                }
            }
        }
        for (id, (balance, reserved, changed)) in &accounts {
            if *changed {
                sqlx::query(
                    "UPDATE accounts SET balance_nanos = $2, reserved_nanos = $3 WHERE id = $1",
                )
                .bind(id)
                .bind(balance)
                .bind(reserved)
                .execute(&mut *tx)
                .await?;
            }
        }
        for (id, (_, settled)) in &open {
            if *settled > 0 {
                sqlx::query("UPDATE grants SET amount_nanos = amount_nanos - $2, settled_nanos = settled_nanos + $2 WHERE id = $1")
                    .bind(id)
                    .bind(settled)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(applied)
    }
}

/// A journal row about a grant as a whole (take, return, expiry).
struct GrantRow {
    account_id: i64,
    kind: &'static str,
    amount: i64,
    balance_delta: i64,
    reserved_delta: i64,
    balance_after: i64,
    reserved_after: i64,
    grant_id: i64,
    at_ms: i64,
}

impl GrantRow {
    async fn append(&self, tx: &mut Transaction<'static, Any>) -> Result<(), LedgerError> {
        sqlx::query(
            "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, \
             reserved_after, uncollected_nanos, grant_id, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9)",
        )
        .bind(self.account_id)
        .bind(self.kind)
        .bind(self.amount)
        .bind(self.balance_delta)
        .bind(self.reserved_delta)
        .bind(self.balance_after)
        .bind(self.reserved_after)
        .bind(self.grant_id)
        .bind(self.at_ms)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// One settlement's journal row.
struct SettleRow<'a> {
    job: &'a Job,
    kind: &'static str,
    amount: i64,
    uncollected: i64,
    balance_after: i64,
    reserved_after: i64,
}

/// Inserts `rows` (in statements of [`ROWS_PER_INSERT`]), skipping those already in the
/// journal; returns how many went in (`None` if a value could not be bound).
async fn insert_rows(
    tx: &mut Transaction<'static, Any>,
    rows: &[SettleRow<'_>],
) -> Result<Option<usize>, LedgerError> {
    let mut inserted = 0;
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = placeholders(chunk.len());
        let mut q = sqlx::query(&sql);
        for r in chunk {
            let delta = if r.kind == "settle" { -r.amount } else { 0 };
            q = q
                .bind(r.job.account_id)
                .bind(r.kind)
                .bind(r.amount)
                .bind(delta)
                .bind(delta)
                .bind(r.balance_after)
                .bind(r.reserved_after)
                .bind(r.uncollected)
                .bind(r.job.request_id.clone())
                .bind(r.job.at_ms)
                .bind(r.job.grant_id)
                .bind(r.job.hold_id)
                .bind(to_db("input tokens", r.job.usage.input_tokens)?)
                .bind(to_db("output tokens", r.job.usage.output_tokens)?)
                .bind(r.job.usage.upstream.clone());
        }
        let ids: Vec<i64> = q
            .fetch_all(&mut **tx)
            .await?
            .iter()
            .map(|r| r.try_get::<i64, _>(0))
            .collect::<Result<_, _>>()?;
        inserted += ids.len();
    }
    Ok(Some(inserted))
}

/// The INSERT of `n` settlement rows, 15 values each, `RETURNING hold_id`.
fn placeholders(n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, balance_after, \
         reserved_after, uncollected_nanos, request_id, at_ms, grant_id, hold_id, input_tokens, output_tokens, upstream) VALUES ",
    );
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for c in 0..15 {
            if c > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", i * 15 + c + 1));
        }
        sql.push(')');
    }
    sql.push_str(" ON CONFLICT DO NOTHING RETURNING hold_id");
    sql
}

mod postgres;
#[cfg(test)]
mod tests;
