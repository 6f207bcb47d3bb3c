//! Synthetic checks in the ledger (docs/design.md §10): one row per check in
//! `synthetic_checks`, and the check's cost journalled as spend of the system account
//! [`SYNTHETIC_ACCOUNT`], in the same transaction.
//!
//! The account is made on demand and never refuses a check: its balance stays 0. The
//! journal's `kind` CHECK has no kind for "spend without a reservation" and cannot be
//! widened on SQLite without rebuilding the table, so a check of cost C is two rows:
//! a `topup` of C, then a `settle` of C without a reservation. The account's spend is
//! the sum of its settles ([`Ledger::synthetic_spend`]); `journal_verify` holds as for
//! any account. These rows never touch reservations.

use std::time::{Duration, SystemTime};

use sqlx::{AnyConnection, Row};

use crate::error::LedgerError;
use crate::ledger::{Ledger, to_db, unix_ms};

/// The system account that pays for synthetic checks.
pub const SYNTHETIC_ACCOUNT: &str = "sluice-synthetic";

/// How long `synthetic_checks` rows are kept (the status page shows at most 90 days).
pub const SYNTHETIC_RETENTION: Duration = Duration::from_secs(90 * 86_400);

/// One finished synthetic check of one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticCheck {
    /// Route key, as in `route_minutes.route` (`namespace/name`).
    pub route: String,
    /// Upstream key, as in `upstream_outcomes.upstream` (`namespace/name`).
    pub upstream: String,
    /// The gateway process that ran it (its heartbeat id).
    pub gateway_id: String,
    /// When it finished.
    pub at: SystemTime,
    /// `ok`, or the attempt's outcome label (`http_5xx`, `connect`, …).
    pub outcome: String,
    /// Time to the first content of the answer, when one came.
    pub first_byte_ms: Option<u64>,
    /// What it cost at the candidate's price, nanodollars (0 for a free or failed check).
    pub cost_nanos: i64,
}

impl SyntheticCheck {
    /// The journal's `request_id` of its cost: `synthetic:<route>:<upstream>:<ms>`.
    pub fn request_id(&self) -> String {
        format!("synthetic:{}:{}:{}", self.route, self.upstream, unix_ms(self.at))
    }
}

impl Ledger {
    /// Stores a check and journals its cost on [`SYNTHETIC_ACCOUNT`] (made if missing),
    /// in one transaction: either both or neither.
    pub async fn record_synthetic(&self, check: &SyntheticCheck) -> Result<(), LedgerError> {
        crate::accounts::non_negative("synthetic check cost", check.cost_nanos)?;
        let at_ms = unix_ms(check.at);
        let first_byte_ms = check.first_byte_ms.map(|ms| to_db("first-byte time", ms)).transpose()?;
        let mut tx = self.begin_write().await?;
        // Made by the first check, paid or not, so that `admin account show` finds it.
        let account_id = synthetic_account(&mut tx, at_ms).await?;
        if check.cost_nanos > 0 {
            let request_id = check.request_id();
            let cost = check.cost_nanos;
            move_money(&mut tx, account_id, "topup", cost, cost, &request_id, at_ms).await?;
            move_money(&mut tx, account_id, "settle", cost, -cost, &request_id, at_ms).await?;
        }
        sqlx::query(
            "INSERT INTO synthetic_checks (route, upstream, gateway_id, at_ms, outcome, first_byte_ms, cost_nanos) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&check.route)
        .bind(&check.upstream)
        .bind(&check.gateway_id)
        .bind(at_ms)
        .bind(&check.outcome)
        .bind(first_byte_ms)
        .bind(check.cost_nanos)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes the checks that finished before `before`; returns how many. The journal
    /// rows of their cost stay (the journal is append-only).
    pub async fn prune_synthetic(&self, before: SystemTime) -> Result<u64, LedgerError> {
        let done = sqlx::query("DELETE FROM synthetic_checks WHERE at_ms < $1")
            .bind(unix_ms(before))
            .execute(&self.inner.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// What synthetic checks have cost so far, nanodollars: the sum of the settles of
    /// [`SYNTHETIC_ACCOUNT`] (0 before the first paid check).
    pub async fn synthetic_spend(&self) -> Result<i64, LedgerError> {
        let spent: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(j.amount_nanos), 0) AS BIGINT) FROM journal j \
             JOIN accounts a ON a.id = j.account_id WHERE a.name = $1 AND j.kind = 'settle'",
        )
        .bind(SYNTHETIC_ACCOUNT)
        .fetch_one(&self.inner.reader)
        .await?;
        Ok(spent)
    }
}

/// The id of [`SYNTHETIC_ACCOUNT`], made (and journalled `open` with 0) if missing.
async fn synthetic_account(conn: &mut AnyConnection, at_ms: i64) -> Result<i64, LedgerError> {
    let made: Option<i64> = sqlx::query_scalar(
        "INSERT INTO accounts (name, balance_nanos, reserved_nanos, created_at_ms) \
         VALUES ($1, 0, 0, $2) ON CONFLICT (name) DO NOTHING RETURNING id",
    )
    .bind(SYNTHETIC_ACCOUNT)
    .bind(at_ms)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = made {
        journal(conn, id, "open", 0, 0, (0, 0), None, at_ms).await?;
        return Ok(id);
    }
    let id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
        .bind(SYNTHETIC_ACCOUNT)
        .fetch_one(&mut *conn)
        .await?;
    Ok(id)
}

/// Adds `delta` to the account's balance (a row lock on Postgres, the write lock on
/// SQLite) and journals it as `kind` with the balance and reserved amount after it.
async fn move_money(
    conn: &mut AnyConnection,
    account_id: i64,
    kind: &str,
    amount: i64,
    delta: i64,
    request_id: &str,
    at_ms: i64,
) -> Result<(), LedgerError> {
    // The bounds keep SQLite from turning an overflowing sum into a REAL, and the
    // balance from going below what is reserved (the CHECK would refuse it anyway).
    let row = sqlx::query(
        "UPDATE accounts SET balance_nanos = balance_nanos + $2 \
         WHERE id = $1 AND balance_nanos <= $3 AND balance_nanos + $2 >= reserved_nanos \
         RETURNING balance_nanos, reserved_nanos",
    )
    .bind(account_id)
    .bind(delta)
    .bind(i64::MAX - delta.max(0))
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| LedgerError::Overflow { account: SYNTHETIC_ACCOUNT.to_owned(), nanos: delta })?;
    let after = (row.try_get(0)?, row.try_get(1)?);
    journal(conn, account_id, kind, amount, delta, after, Some(request_id), at_ms).await
}

/// Appends one journal row. Written here rather than through `journal::append` so that
/// it names only the columns of the first schema, which every later one keeps.
#[expect(clippy::too_many_arguments, reason = "one row's columns; two call sites")]
async fn journal(
    conn: &mut AnyConnection,
    account_id: i64,
    kind: &str,
    amount: i64,
    balance_delta: i64,
    (balance_after, reserved_after): (i64, i64),
    request_id: Option<&str>,
    at_ms: i64,
) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, \
         balance_after, reserved_after, uncollected_nanos, reservation_id, request_id, at_ms) \
         VALUES ($1, $2, $3, $4, 0, $5, $6, 0, NULL, $7, $8)",
    )
    .bind(account_id)
    .bind(kind)
    .bind(amount)
    .bind(balance_delta)
    .bind(balance_after)
    .bind(reserved_after)
    .bind(request_id)
    .bind(at_ms)
    .execute(conn)
    .await?;
    Ok(())
}
