//! The database side of grants (docs/design.md §5a), one SQL text for both databases:
//! take (open or grow a grant, or only extend its validity), post (move what a grant
//! settled out of its account's balance and reserved), close (return or expire), the
//! reaper, and a settlement batch.
//!
//! Lock order, everywhere: the account row first, then the grant row, so that takes,
//! posts, returns and reapers of many processes never deadlock on Postgres. A settlement
//! batch locks only grant rows (in id order) and never waits for an account: the point of
//! settling into the grant is that processes on one account do not take turns on its row.
//! On SQLite the write transaction (`BEGIN IMMEDIATE`) holds the only lock there is.

use sqlx::{Any, Row, Transaction};

use super::writer::Job;
use crate::error::LedgerError;
use crate::ledger::Ledger;

/// Grants the reaper closes per query (it loops until none are left).
const REAP_BATCH: i64 = 500;

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
    Took { grant_id: i64, amount: i64, free: i64 },
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
    Some(if half >= target { target } else { half.max(need) })
}

/// A grant as a transaction that locked it found it.
struct Locked {
    open: bool,
    unposted: i64,
    expires_at_ms: i64,
}

impl Ledger {
    /// Locks account `id` for the transaction (the first lock it takes) and reads its
    /// stored balance and reserved amount. On Postgres `FOR NO KEY UPDATE` (the lock an
    /// UPDATE of its balance takes anyway), not `FOR UPDATE`: a settlement batch's
    /// journal rows reference the account, and that foreign key check takes a key-share
    /// lock on it, which `FOR UPDATE` would make wait.
    async fn lock_account(
        tx: &mut Transaction<'static, Any>,
        postgres: bool,
        id: i64,
    ) -> Result<Option<(i64, i64)>, LedgerError> {
        let sql = if postgres {
            "SELECT balance_nanos, reserved_nanos FROM accounts WHERE id = $1 FOR NO KEY UPDATE"
        } else {
            "SELECT balance_nanos, reserved_nanos FROM accounts WHERE id = $1"
        };
        let row = sqlx::query(sql).bind(id).fetch_optional(&mut **tx).await?;
        Ok(match row {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
            None => None,
        })
    }

    /// Locks grant `grant_id` of account `account_id` (after its account: the lock order
    /// of this module) and reads what a take or a close needs.
    async fn lock_grant(
        tx: &mut Transaction<'static, Any>,
        postgres: bool,
        account_id: i64,
        grant_id: i64,
    ) -> Result<Option<Locked>, LedgerError> {
        let sql = if postgres {
            "SELECT state, unposted_nanos, expires_at_ms FROM grants WHERE id = $1 AND account_id = $2 FOR NO KEY UPDATE"
        } else {
            "SELECT state, unposted_nanos, expires_at_ms FROM grants WHERE id = $1 AND account_id = $2"
        };
        let row = sqlx::query(sql).bind(grant_id).bind(account_id).fetch_optional(&mut **tx).await?;
        Ok(match row {
            Some(r) => Some(Locked {
                open: r.try_get::<String, _>(0)? == "open",
                unposted: r.try_get(1)?,
                expires_at_ms: r.try_get(2)?,
            }),
            None => None,
        })
    }

    /// Posts what grant `grant_id` settled since it last posted to its account, which
    /// the transaction has locked with the stored `balance` and `reserved`: both lose
    /// it, in a `post` journal row. Returns the stored values after.
    async fn post_locked(
        tx: &mut Transaction<'static, Any>,
        account_id: i64,
        grant_id: i64,
        unposted: i64,
        (balance, reserved): (i64, i64),
        now_ms: i64,
    ) -> Result<(i64, i64), LedgerError> {
        if unposted == 0 {
            return Ok((balance, reserved));
        }
        sqlx::query("UPDATE grants SET unposted_nanos = unposted_nanos - $2 WHERE id = $1")
            .bind(grant_id)
            .bind(unposted)
            .execute(&mut **tx)
            .await?;
        sqlx::query(
            "UPDATE accounts SET balance_nanos = balance_nanos - $2, reserved_nanos = reserved_nanos - $2 WHERE id = $1",
        )
        .bind(account_id)
        .bind(unposted)
        .execute(&mut **tx)
        .await?;
        let after = (balance - unposted, reserved - unposted);
        let row = GrantRow {
            account_id,
            kind: "post",
            amount: unposted,
            balance_delta: -unposted,
            reserved_delta: -unposted,
            balance_after: after.0,
            reserved_after: after.1,
            grant_id,
            at_ms: now_ms,
        };
        row.append(tx).await?;
        Ok(after)
    }

    /// Posts what open grant `grant_id` has settled but not posted to its account
    /// (docs/design.md §5a), in one transaction; returns how much. Gateways post as part
    /// of renewals and closes; this alone is for tests.
    #[cfg(test)]
    pub(crate) async fn post_grant(&self, account_id: i64, grant_id: i64, now_ms: i64) -> Result<i64, LedgerError> {
        let pg = self.is_postgres();
        let mut tx = self.begin_write().await?;
        let Some(stored) = Self::lock_account(&mut tx, pg, account_id).await? else {
            tx.rollback().await?;
            return Err(LedgerError::UnknownAccountId(account_id));
        };
        let unposted = match Self::lock_grant(&mut tx, pg, account_id, grant_id).await? {
            Some(g) if g.unposted > 0 => g.unposted,
            _ => {
                tx.rollback().await?;
                return Ok(0);
            }
        };
        Self::post_locked(&mut tx, account_id, grant_id, unposted, stored, now_ms).await?;
        tx.commit().await?;
        Ok(unposted)
    }

    /// Opens or grows a grant in one transaction (docs/design.md §5a), journalled as
    /// `reserve` with the grant's id when money moves; a grown grant also posts what it
    /// settled.
    pub(crate) async fn take_grant(&self, t: &Take<'_>) -> Result<Taken, LedgerError> {
        let pg = self.is_postgres();
        let mut tx = self.begin_write().await?;
        let Some(stored) = Self::lock_account(&mut tx, pg, t.account_id).await? else {
            tx.rollback().await?;
            return Err(LedgerError::UnknownAccountId(t.account_id));
        };
        // Posting moves nothing between balance and reserved: what is free is the same.
        let free = stored.0 - stored.1;
        let Some(amount) = take_size(free, t.need, t.target) else {
            tx.rollback().await?;
            return Ok(Taken::Short { free });
        };
        let (grant_id, (balance, reserved)) = match t.grant_id {
            Some(id) => {
                let unposted = match Self::lock_grant(&mut tx, pg, t.account_id, id).await? {
                    Some(g) if g.open => g.unposted,
                    _ => {
                        tx.rollback().await?;
                        return Ok(Taken::GrantGone);
                    }
                };
                let after = Self::post_locked(&mut tx, t.account_id, id, unposted, stored, t.now_ms).await?;
                sqlx::query(
                    "UPDATE grants SET amount_nanos = amount_nanos + $2, renewed_at_ms = $3, \
                     valid_until_ms = $4, expires_at_ms = $5 WHERE id = $1",
                )
                .bind(id)
                .bind(amount)
                .bind(t.now_ms)
                .bind(t.valid_until_ms)
                .bind(t.expires_at_ms)
                .execute(&mut *tx)
                .await?;
                (id, after)
            }
            None => {
                let id = sqlx::query_scalar(
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
                .await?;
                (id, stored)
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
        Ok(Taken::Took { grant_id, amount, free: free - amount })
    }

    /// Gives grant `grant_id` back: it posts what it settled, and its remaining amount
    /// leaves the account's `reserved`, journalled as `release` (a return) or `expire`
    /// (the reaper). With `due_by`, only if its `expires_at_ms` is at or before that.
    /// Returns whether it was open (and so closed now).
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
        let Some(stored) = Self::lock_account(&mut tx, pg, account_id).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let unposted = match Self::lock_grant(&mut tx, pg, account_id, grant_id).await? {
            Some(g) if g.open && g.expires_at_ms <= due_by.unwrap_or(i64::MAX) => g.unposted,
            _ => {
                tx.rollback().await?;
                return Ok(false);
            }
        };
        let (balance, reserved) = Self::post_locked(&mut tx, account_id, grant_id, unposted, stored, now_ms).await?;
        let state = if expire { "expired" } else { "returned" };
        let amount: i64 =
            sqlx::query_scalar("UPDATE grants SET state = $2, closed_at_ms = $3 WHERE id = $1 RETURNING amount_nanos")
                .bind(grant_id)
                .bind(state)
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await?;
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
            let due = sqlx::query(
                "SELECT id, account_id FROM grants WHERE state = 'open' AND expires_at_ms <= $1 ORDER BY id LIMIT $2",
            )
            .bind(now_ms)
            .bind(REAP_BATCH)
            .fetch_all(&self.inner.reader)
            .await?;
            let batch_len = due.len();
            for row in due {
                let (id, account_id): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                if self.close_grant(account_id, id, true, now_ms, Some(now_ms)).await? {
                    reaped += 1;
                }
            }
            if batch_len < usize::try_from(REAP_BATCH).unwrap_or(usize::MAX) {
                break;
            }
        }
        if reaped > 0 {
            tracing::info!(reaped, "expired grants of processes that did not return them");
        }
        Ok(reaped)
    }

    /// The open grants of account `account_id`: how many, and what they hold of its
    /// `reserved` for new requests (the rest is held by per-request reservations, or
    /// settled and not posted yet).
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
    /// charge is uncollected) and each grant row updated once. The account rows are not
    /// touched: a settlement moves money from the grant's amount to its `unposted`,
    /// both inside the account's `reserved` (docs/design.md §5a), so batches of
    /// processes on one account never wait for each other. Idempotent: a row whose
    /// `(grant_id, hold_id)` is in the journal already (a batch retried after an
    /// unknown commit outcome) is not inserted, and only inserted rows move money.
    /// Returns, per job, whether its grant was open (money moved).
    pub(crate) async fn settle_batch(&self, jobs: &[Job]) -> Result<Vec<bool>, LedgerError> {
        if self.is_postgres() { self.settle_batch_postgres(jobs).await } else { self.settle_batch_sqlite(jobs).await }
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

mod postgres;
mod sqlite;
#[cfg(test)]
mod tests;
