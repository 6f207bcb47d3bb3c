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
///
/// With balance grants (docs/design.md §5a) a settlement moves money inside its grant and
/// reaches the account row when the grant posts, so the row holds what grants settled
/// since they last posted (`unposted`) in both its balance and reserved. The balance and
/// reserved here are the row's less that, as [`Ledger::account`] reads them; the journal
/// reproduces them on its own (its rows say what each grant settled and posted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JournalCheck {
    /// The account name.
    pub account: String,
    /// The balance: the row's less what open grants have not posted.
    pub balance_nanos: i64,
    /// What is reserved: the row's less what open grants have not posted.
    pub reserved_nanos: i64,
    /// `accounts.balance_nanos` as stored.
    pub stored_balance_nanos: i64,
    /// `accounts.reserved_nanos` as stored.
    pub stored_reserved_nanos: i64,
    /// What open grants settled and have not posted (their `unposted_nanos`).
    pub unposted_nanos: i64,
    /// The balance as the journal adds it up: Σ balance deltas less what its grant
    /// rows settled and did not post.
    pub journal_balance_nanos: i64,
    /// Reserved as the journal adds it up, likewise.
    pub journal_reserved_nanos: i64,
    /// What the journal's grant rows settled and did not post.
    pub journal_unposted_nanos: i64,
    /// Σ amounts of the account's open reservations.
    pub open_reservations_nanos: i64,
    /// Σ of what the account's open grants hold for new requests.
    pub open_grants_nanos: i64,
    /// Grants whose journal rows do not explain them (0 when consistent): what each
    /// holds of the stored `reserved`, what it settled and what it posted must each be
    /// the sum of its rows.
    pub unexplained_grants: u64,
    /// `balance_after`/`reserved_after` of the newest journal row that has them (a
    /// settlement on a grant does not touch the account row and has none); they must
    /// be the stored values.
    pub last_after: Option<(i64, i64)>,
    /// Σ charges that could not be collected (actual cost above the reservation, or a
    /// settle after expiry).
    pub uncollected_nanos: i64,
    /// Journal rows of the account.
    pub entries: u64,
}

impl JournalCheck {
    /// True when the balance and reserved equal what the journal adds up to (and so do
    /// the stored values and the newest "after" values), reserved equals the open
    /// reservations plus the open grants, every grant's journal rows explain it, and
    /// balance ≥ reserved ≥ 0.
    pub fn is_consistent(&self) -> bool {
        self.balance_nanos == self.journal_balance_nanos
            && self.reserved_nanos == self.journal_reserved_nanos
            && self.unposted_nanos == self.journal_unposted_nanos
            && self.reserved_nanos == self.open_reservations_nanos + self.open_grants_nanos
            && self.unexplained_grants == 0
            && self.last_after == Some((self.stored_balance_nanos, self.stored_reserved_nanos))
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
        let row = sqlx::query("SELECT id, balance_nanos, reserved_nanos FROM accounts WHERE name = $1")
            .bind(account)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| LedgerError::UnknownAccount(account.to_owned()))?;
        let id: i64 = row.try_get(0)?;
        // What a grant settled and did not post: its `settle` rows (those written before
        // posting existed moved the balance themselves: amount + balance_delta = 0) less
        // its `post` rows.
        let sums = sqlx::query(
            "SELECT CAST(COALESCE(SUM(balance_delta), 0) AS BIGINT), \
             CAST(COALESCE(SUM(reserved_delta), 0) AS BIGINT), \
             CAST(COALESCE(SUM(uncollected_nanos), 0) AS BIGINT), COUNT(*), \
             CAST(COALESCE(SUM(CASE WHEN grant_id IS NULL THEN 0 \
                                    WHEN kind = 'settle' THEN amount_nanos + balance_delta \
                                    WHEN kind = 'post' THEN -amount_nanos ELSE 0 END), 0) AS BIGINT) \
             FROM journal WHERE account_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let last = sqlx::query(
            "SELECT balance_after, reserved_after FROM journal WHERE account_id = $1 \
             AND balance_after IS NOT NULL ORDER BY id DESC LIMIT 1",
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
        // Grants (docs/design.md §5a). What an open one holds (room plus unposted) is in
        // the stored `reserved`, and its journal rows explain it three ways: their
        // reserved deltas add up to what it holds (nothing once closed), their
        // settlements to what it settled, and what left the balance through it (posts;
        // settlements before posting existed moved the account themselves) to what it
        // settled less what it has not posted yet.
        let grants = sqlx::query(
            "SELECT CAST(COALESCE(SUM(CASE WHEN g.state = 'open' THEN g.amount_nanos ELSE 0 END), 0) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN g.state = 'open' THEN g.unposted_nanos ELSE 0 END), 0) AS BIGINT), \
             COUNT(CASE WHEN COALESCE(j.reserved, 0) <> (CASE WHEN g.state = 'open' THEN g.amount_nanos + g.unposted_nanos ELSE 0 END) \
                          OR COALESCE(j.settled, 0) <> g.settled_nanos \
                          OR COALESCE(j.balance, 0) <> g.unposted_nanos - g.settled_nanos THEN 1 END) \
             FROM grants g LEFT JOIN ( \
               SELECT grant_id, SUM(reserved_delta) AS reserved, SUM(balance_delta) AS balance, \
                      SUM(CASE WHEN kind = 'settle' THEN amount_nanos ELSE 0 END) AS settled \
               FROM journal WHERE account_id = $1 AND grant_id IS NOT NULL GROUP BY grant_id) j ON j.grant_id = g.id \
             WHERE g.account_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        tx.rollback().await?;
        let (stored_balance, stored_reserved, unposted): (i64, i64, i64) =
            (row.try_get(1)?, row.try_get(2)?, grants.try_get(1)?);
        let journal_unposted: i64 = sums.try_get(4)?;
        Ok(JournalCheck {
            open_grants_nanos: grants.try_get(0)?,
            unposted_nanos: unposted,
            unexplained_grants: from_db(grants.try_get(2)?),
            account: account.to_owned(),
            balance_nanos: stored_balance - unposted,
            reserved_nanos: stored_reserved - unposted,
            stored_balance_nanos: stored_balance,
            stored_reserved_nanos: stored_reserved,
            journal_balance_nanos: sums.try_get::<i64, _>(0)? - journal_unposted,
            journal_reserved_nanos: sums.try_get::<i64, _>(1)? - journal_unposted,
            journal_unposted_nanos: journal_unposted,
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
