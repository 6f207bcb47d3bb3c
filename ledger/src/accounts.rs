//! Wallets (accounts), top-ups and API keys.

use std::time::SystemTime;

use rand::Rng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::error::LedgerError;
use crate::journal::{self, Entry, EntryKind};
use crate::ledger::{Ledger, unix_ms};

/// A wallet. `balance_nanos − reserved_nanos` is what new reservations may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Account {
    /// Database id (what [`Ledger::reserve`] takes).
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// Money in the wallet, nanodollars.
    pub balance_nanos: i64,
    /// Part of the balance held by open reservations, nanodollars.
    pub reserved_nanos: i64,
}

/// What an API key authenticates as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccountRef {
    /// Database id.
    pub id: i64,
    /// Account name.
    pub name: String,
}

/// Every key starts with this.
const KEY_PREFIX: &str = "sk-sluice-";
/// Random characters after the prefix: 43 × 6 bits = 258 bits.
const KEY_RANDOM_CHARS: usize = 43;
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Account {
    /// `balance − reserved`: what a new reservation may take.
    pub fn available_nanos(&self) -> i64 {
        self.balance_nanos - self.reserved_nanos
    }

    fn from_row(row: &AnyRow) -> Result<Account, sqlx::Error> {
        Ok(Account {
            id: row.try_get(0)?,
            name: row.try_get(1)?,
            balance_nanos: row.try_get(2)?,
            reserved_nanos: row.try_get(3)?,
        })
    }
}

impl Ledger {
    /// Creates an account with an opening balance (journalled as `open`).
    pub async fn create_account(
        &self,
        name: &str,
        balance_nanos: i64,
    ) -> Result<Account, LedgerError> {
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
        Ok(Account {
            id,
            name: name.to_owned(),
            balance_nanos,
            reserved_nanos: 0,
        })
    }

    /// The account called `name`, if any.
    pub async fn account(&self, name: &str) -> Result<Option<Account>, LedgerError> {
        let row = sqlx::query(
            "SELECT id, name, balance_nanos, reserved_nanos FROM accounts WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&self.inner.reader)
        .await?;
        Ok(row.as_ref().map(Account::from_row).transpose()?)
    }

    /// The account with database id `id`, if any.
    pub async fn account_by_id(&self, id: i64) -> Result<Option<Account>, LedgerError> {
        let row = sqlx::query(
            "SELECT id, name, balance_nanos, reserved_nanos FROM accounts WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.inner.reader)
        .await?;
        Ok(row.as_ref().map(Account::from_row).transpose()?)
    }

    /// Adds `amount_nanos` to the balance of `name` (journalled as `topup`).
    pub async fn topup(&self, name: &str, amount_nanos: i64) -> Result<Account, LedgerError> {
        non_negative("top-up amount", amount_nanos)?;
        let now = unix_ms(SystemTime::now());
        let mut tx = self.begin_write().await?;
        // The bound keeps SQLite from silently turning an overflowing sum into a REAL.
        let row = sqlx::query(
            "UPDATE accounts SET balance_nanos = balance_nanos + $2 \
             WHERE name = $1 AND balance_nanos <= $3 \
             RETURNING id, name, balance_nanos, reserved_nanos",
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
                Some(_) => LedgerError::Overflow {
                    account: name.to_owned(),
                    nanos: amount_nanos,
                },
                None => LedgerError::UnknownAccount(name.to_owned()),
            });
        };
        let account = Account::from_row(&row)?;
        let entry = Entry {
            account_id: account.id,
            kind: EntryKind::Topup,
            amount_nanos,
            balance_delta: amount_nanos,
            reserved_delta: 0,
            balance_after: account.balance_nanos,
            reserved_after: account.reserved_nanos,
            uncollected_nanos: 0,
            reservation_id: None,
            request_id: None,
            at_ms: now,
        };
        journal::append(&mut tx, &entry).await?;
        tx.commit().await?;
        Ok(account)
    }

    /// Creates an API key for `account_name` and returns it. This is the only time the
    /// key exists in clear: only its SHA-256 is stored.
    pub async fn create_key(&self, account_name: &str) -> Result<String, LedgerError> {
        let key = new_key();
        let mut tx = self.begin_write().await?;
        let id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
            .bind(account_name)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| LedgerError::UnknownAccount(account_name.to_owned()))?;
        sqlx::query(
            "INSERT INTO api_keys (key_hash, account_id, key_prefix, created_at_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(hash_key(&key))
        .bind(id)
        .bind(&key[..KEY_PREFIX.len() + 4])
        .bind(unix_ms(SystemTime::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(key)
    }

    /// The account an API key belongs to, or `None` for an unknown key. One indexed
    /// query; strings that cannot be a key are refused without touching the database.
    pub async fn authenticate(&self, key: &str) -> Result<Option<AccountRef>, LedgerError> {
        if !key.starts_with(KEY_PREFIX) || key.len() > 256 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT a.id, a.name FROM api_keys k JOIN accounts a ON a.id = k.account_id \
             WHERE k.key_hash = $1",
        )
        .bind(hash_key(key))
        .fetch_optional(&self.inner.reader)
        .await?;
        Ok(match row {
            Some(row) => Some(AccountRef {
                id: row.try_get(0)?,
                name: row.try_get(1)?,
            }),
            None => None,
        })
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
    let ok = !name.is_empty()
        && name.chars().count() <= 128
        && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(LedgerError::InvalidAccountName(name.to_owned()))
    }
}

fn new_key() -> String {
    let mut rng = rand::rng();
    let mut key = String::with_capacity(KEY_PREFIX.len() + KEY_RANDOM_CHARS);
    key.push_str(KEY_PREFIX);
    for _ in 0..KEY_RANDOM_CHARS {
        // 64 symbols: masking a uniform byte to 6 bits is unbiased.
        let index = usize::from(rng.random::<u8>() & 63);
        key.push(char::from(URL_SAFE[index]));
    }
    key
}

fn hash_key(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 15)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_url_safe_and_distinct() {
        let a = new_key();
        let b = new_key();
        assert_ne!(a, b);
        assert!(a.starts_with("sk-sluice-"));
        assert_eq!(a.len(), KEY_PREFIX.len() + KEY_RANDOM_CHARS);
        assert!(
            a[KEY_PREFIX.len()..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_name("team-a").is_ok());
        for bad in ["", "a b", "tab\there", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
