//! The append-only journal: one row per change of money, and its verification.

use serde::Serialize;
use sqlx::{AnyConnection, Row};

use crate::error::LedgerError;
use crate::ledger::{Ledger, from_db};

/// What a journal row records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// Account created with an opening balance.
    Open,
    Topup,
    Reserve,
    /// Charge and release of the rest, in one row.
    Settle,
    Release,
    /// Released by the reaper after the reservation's expiry.
    Expire,
    /// A settle that arrived after the reservation was released or expired: no money
    /// moves, the charge is recorded as uncollected.
    LateSettle,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            EntryKind::Open => "open",
            EntryKind::Topup => "topup",
            EntryKind::Reserve => "reserve",
            EntryKind::Settle => "settle",
            EntryKind::Release => "release",
            EntryKind::Expire => "expire",
            EntryKind::LateSettle => "late_settle",
        }
    }
}

/// One journal row to append.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub account_id: i64,
    pub kind: EntryKind,
    /// The amount the operation was about (estimate, charge, topup…).
    pub amount_nanos: i64,
    pub balance_delta: i64,
    pub reserved_delta: i64,
    pub balance_after: i64,
    pub reserved_after: i64,
    pub uncollected_nanos: i64,
    pub reservation_id: Option<i64>,
    pub request_id: Option<&'a str>,
    pub at_ms: i64,
}

/// The result of [`Ledger::journal_verify`]: the account as stored and as the journal
/// adds it up, read from one consistent snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JournalCheck {
    /// The account name.
    pub account: String,
    /// `accounts.balance_nanos`.
    pub balance_nanos: i64,
    /// `accounts.reserved_nanos`.
    pub reserved_nanos: i64,
    /// Σ balance deltas in the journal.
    pub journal_balance_nanos: i64,
    /// Σ reserved deltas in the journal.
    pub journal_reserved_nanos: i64,
    /// Σ amounts of the account's open reservations.
    pub open_reservations_nanos: i64,
    /// Σ amounts the account's open grants hold (docs/design.md §5a).
    pub open_grants_nanos: i64,
    /// Grants whose journal rows do not add up to what they hold (0 when consistent).
    pub unexplained_grants: u64,
    /// `balance_after`/`reserved_after` of the newest journal row.
    pub last_after: Option<(i64, i64)>,
    /// Σ charges that could not be collected (actual cost above the reservation, or a
    /// settle after expiry).
    pub uncollected_nanos: i64,
    /// Journal rows of the account.
    pub entries: u64,
}

impl JournalCheck {
    /// True when balance and reserved equal the journal sums and the newest row's
    /// "after" values, reserved equals the open reservations plus the open grants, every
    /// grant's journal rows explain what it holds, and balance ≥ reserved ≥ 0.
    pub fn is_consistent(&self) -> bool {
        self.balance_nanos == self.journal_balance_nanos
            && self.reserved_nanos == self.journal_reserved_nanos
            && self.reserved_nanos == self.open_reservations_nanos + self.open_grants_nanos
            && self.unexplained_grants == 0
            && self.last_after == Some((self.balance_nanos, self.reserved_nanos))
            && self.reserved_nanos >= 0
            && self.balance_nanos >= self.reserved_nanos
    }
}

/// Appends one row inside the caller's transaction.
pub(crate) async fn append(conn: &mut AnyConnection, e: &Entry<'_>) -> Result<(), LedgerError> {
    sqlx::query(
        "INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, \
         balance_after, reserved_after, uncollected_nanos, reservation_id, request_id, at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(e.account_id)
    .bind(e.kind.as_str())
    .bind(e.amount_nanos)
    .bind(e.balance_delta)
    .bind(e.reserved_delta)
    .bind(e.balance_after)
    .bind(e.reserved_after)
    .bind(e.uncollected_nanos)
    .bind(e.reservation_id)
    .bind(e.request_id)
    .bind(e.at_ms)
    .execute(conn)
    .await?;
    Ok(())
}

impl Ledger {
    /// Adds up the journal of `account` and compares it with the stored balance and
    /// reserved amount (see [`JournalCheck::is_consistent`]). Safe to run while money
    /// moves: everything is read from one snapshot.
    pub async fn journal_verify(&self, account: &str) -> Result<JournalCheck, LedgerError> {
        let mut tx = self.begin_snapshot().await?;
        let row =
            sqlx::query("SELECT id, balance_nanos, reserved_nanos FROM accounts WHERE name = $1")
                .bind(account)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| LedgerError::UnknownAccount(account.to_owned()))?;
        let id: i64 = row.try_get(0)?;
        let sums = sqlx::query(
            "SELECT CAST(COALESCE(SUM(balance_delta), 0) AS BIGINT), \
             CAST(COALESCE(SUM(reserved_delta), 0) AS BIGINT), \
             CAST(COALESCE(SUM(uncollected_nanos), 0) AS BIGINT), COUNT(*) \
             FROM journal WHERE account_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let last = sqlx::query(
            "SELECT balance_after, reserved_after FROM journal WHERE account_id = $1 \
             ORDER BY id DESC LIMIT 1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let open: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(amount_nanos), 0) AS BIGINT) FROM reservations \
             WHERE account_id = $1 AND state = 'open'",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        // Grants (docs/design.md §5a): what open ones hold is in `reserved` too, and each
        // grant's journal rows (take, settlements, return or expiry) must add up to what
        // it holds: its amount while open, nothing once closed.
        let grants = sqlx::query(
            "SELECT CAST(COALESCE(SUM(CASE WHEN g.state = 'open' THEN g.amount_nanos ELSE 0 END), 0) AS BIGINT), \
             COUNT(CASE WHEN (CASE WHEN g.state = 'open' THEN g.amount_nanos ELSE 0 END) <> \
               (SELECT COALESCE(SUM(j.reserved_delta), 0) FROM journal j WHERE j.grant_id = g.id) THEN 1 END) \
             FROM grants g WHERE g.account_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        tx.rollback().await?;
        Ok(JournalCheck {
            open_grants_nanos: grants.try_get(0)?,
            unexplained_grants: from_db(grants.try_get(1)?),
            account: account.to_owned(),
            balance_nanos: row.try_get(1)?,
            reserved_nanos: row.try_get(2)?,
            journal_balance_nanos: sums.try_get(0)?,
            journal_reserved_nanos: sums.try_get(1)?,
            uncollected_nanos: sums.try_get(2)?,
            entries: from_db(sums.try_get(3)?),
            open_reservations_nanos: open,
            last_after: match last {
                Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
                None => None,
            },
        })
    }
}
