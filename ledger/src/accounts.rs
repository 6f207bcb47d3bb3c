//! Wallets (accounts) and top-ups; API keys are in `keys.rs`.

use std::time::SystemTime;

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::error::LedgerError;
use crate::journal::{self, Entry, EntryKind};
use crate::ledger::{Ledger, unix_ms};
use crate::notify;

/// A wallet. `balance_nanos − reserved_nanos` is what new reservations may use.
///
/// Both are as of the last settlement: what balance grants settled but have not yet
/// posted to the account row (docs/design.md §5a) is taken out of the stored values here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Account {
    /// Database id (what [`Ledger::reserve`] takes).
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// Money in the wallet, nanodollars.
    pub balance_nanos: i64,
    /// Part of the balance held by open reservations and grants, nanodollars.
    pub reserved_nanos: i64,
}

/// Reads an account with its grants' unposted settlements taken out; `$1` is the name or
/// the id. The correlated sum reads the open grants of one account through
/// `grants_open_by_account`.
const SELECT_ACCOUNT: &str = "SELECT a.id, a.name, a.balance_nanos, a.reserved_nanos, \
     CAST(COALESCE((SELECT SUM(g.unposted_nanos) FROM grants g WHERE g.account_id = a.id AND g.state = 'open'), 0) AS BIGINT) \
     FROM accounts a WHERE ";

/// What an API key authenticates as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccountRef {
    /// Database id.
    pub id: i64,
    /// Account name.
    pub name: String,
    /// The limits the key and its account hold requests to (docs/design.md §5b);
    /// `None` when neither has any.
    pub limits: Option<std::sync::Arc<crate::KeyLimits>>,
}

impl Account {
    /// `balance − reserved`: what a new reservation may take.
    pub fn available_nanos(&self) -> i64 {
        self.balance_nanos - self.reserved_nanos
    }

    /// From a row of [`SELECT_ACCOUNT`].
    fn from_row(row: &AnyRow) -> Result<Account, sqlx::Error> {
        let unposted: i64 = row.try_get(4)?;
        Ok(Account {
            id: row.try_get(0)?,
            name: row.try_get(1)?,
            balance_nanos: row.try_get::<i64, _>(2)? - unposted,
            reserved_nanos: row.try_get::<i64, _>(3)? - unposted,
        })
    }
}

impl Ledger {
    /// Creates an account with an opening balance (journalled as `open`).
    pub async fn create_account(&self, name: &str, balance_nanos: i64) -> Result<Account, LedgerError> {
        validate_name(name)?;
        non_negative("opening balance", balance_nanos)?;
        let now = unix_ms(SystemTime::now());
        let mut tx = self.begin_write().await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO accounts (name, balance_nanos, reserved_nanos, created_at_ms) \
             VALUES ($1, $2, 0, $3) ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(name)
        .bind(balance_nanos)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let id = id.ok_or_else(|| LedgerError::DuplicateAccount(name.to_owned()))?;
        let entry = Entry {
            account_id: id,
            kind: EntryKind::Open,
            amount_nanos: balance_nanos,
            balance_delta: balance_nanos,
            reserved_delta: 0,
            balance_after: balance_nanos,
            reserved_after: 0,
            uncollected_nanos: 0,
            reservation_id: None,
            request_id: None,
            at_ms: now,
        };
        journal::append(&mut tx, &entry).await?;
        tx.commit().await?;
        Ok(Account { id, name: name.to_owned(), balance_nanos, reserved_nanos: 0 })
    }

    /// The account called `name`, if any.
    pub async fn account(&self, name: &str) -> Result<Option<Account>, LedgerError> {
        let row =
            sqlx::query(&format!("{SELECT_ACCOUNT}a.name = $1")).bind(name).fetch_optional(&self.inner.reader).await?;
        Ok(row.as_ref().map(Account::from_row).transpose()?)
    }

    /// The account with database id `id`, if any.
    pub async fn account_by_id(&self, id: i64) -> Result<Option<Account>, LedgerError> {
        let row =
            sqlx::query(&format!("{SELECT_ACCOUNT}a.id = $1")).bind(id).fetch_optional(&self.inner.reader).await?;
        Ok(row.as_ref().map(Account::from_row).transpose()?)
    }

    /// Adds `amount_nanos` to the balance of `name` (journalled as `topup`). Every gateway
    /// learns of it within 1 s ([`Change::Account`](crate::Change::Account)).
    pub async fn topup(&self, name: &str, amount_nanos: i64) -> Result<Account, LedgerError> {
        non_negative("top-up amount", amount_nanos)?;
        let now = unix_ms(SystemTime::now());
        let mut tx = self.begin_write().await?;
        // The bound keeps SQLite from silently turning an overflowing sum into a REAL.
        let row = sqlx::query(
            "UPDATE accounts SET balance_nanos = balance_nanos + $2 \
             WHERE name = $1 AND balance_nanos <= $3 \
             RETURNING id, balance_nanos, reserved_nanos",
        )
        .bind(name)
        .bind(amount_nanos)
        .bind(i64::MAX - amount_nanos)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match exists {
                Some(_) => LedgerError::Overflow { account: name.to_owned(), nanos: amount_nanos },
                None => LedgerError::UnknownAccount(name.to_owned()),
            });
        };
        let (id, balance_after, reserved_after): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let entry = Entry {
            account_id: id,
            kind: EntryKind::Topup,
            amount_nanos,
            balance_delta: amount_nanos,
            reserved_delta: 0,
            balance_after,
            reserved_after,
            uncollected_nanos: 0,
            reservation_id: None,
            request_id: None,
            at_ms: now,
        };
        journal::append(&mut tx, &entry).await?;
        notify::record(self, &mut tx, id, None, now).await?;
        let account = sqlx::query(&format!("{SELECT_ACCOUNT}a.id = $1")).bind(id).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok(Account::from_row(&account)?)
    }
}

/// Refuses a negative amount, naming it.
pub(crate) fn non_negative(what: &'static str, nanos: i64) -> Result<(), LedgerError> {
    if nanos < 0 {
        return Err(LedgerError::NegativeAmount { what, nanos });
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<(), LedgerError> {
    let ok =
        !name.is_empty() && name.chars().count() <= 128 && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok { Ok(()) } else { Err(LedgerError::InvalidAccountName(name.to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(validate_name("team-a").is_ok());
        for bad in ["", "a b", "tab\there", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
