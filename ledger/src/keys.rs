//! API keys: created for an account, listed, revoked, and the hot-path lookup
//! (docs/design.md §3.1, §3.4). Only a key's SHA-256 is stored; each key also has a
//! short stable id (`admin key list` shows it, `admin key revoke` takes it).

use std::time::SystemTime;

use rand::Rng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::accounts::AccountRef;
use crate::error::LedgerError;
use crate::ledger::{Ledger, from_unix_ms, unix_ms};
use crate::notify;

/// Every key starts with this.
pub const KEY_PREFIX: &str = "sk-sluice-";
/// Random characters after the prefix: 43 × 6 bits = 258 bits.
const KEY_RANDOM_CHARS: usize = 43;
/// Characters of the random part kept in clear, to tell keys apart.
const PREFIX_RANDOM_CHARS: usize = 4;
/// The longest string [`key_hash`] accepts as a possible key.
const MAX_KEY_LEN: usize = 256;
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One API key as `admin key list` shows it (never the key itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    /// Stable id, unique in the ledger.
    pub id: i64,
    /// The account the key belongs to.
    pub account: String,
    /// The key's first characters (`sk-sluice-` and 4 more).
    pub prefix: String,
    /// When it was created.
    pub created_at: SystemTime,
    /// When it was revoked, if it was.
    pub revoked_at: Option<SystemTime>,
}

/// Which key to act on: the whole key, or its id from [`Ledger::keys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySelector<'a> {
    /// The key in clear (`sk-sluice-…`).
    Key(&'a str),
    /// The key's id.
    Id(i64),
}

/// What [`Ledger::revoke_key`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// The key, as it is now (`revoked_at` is set).
    pub key: KeyInfo,
    /// Whether it had been revoked before this call (then nothing changed).
    pub already: bool,
}

impl KeySelector<'_> {
    /// How the key is named in messages: its id, or its prefix (never a whole key).
    pub fn describe(&self) -> String {
        match self {
            KeySelector::Id(id) => format!("with id {id}"),
            KeySelector::Key(key) if key.starts_with(KEY_PREFIX) => {
                let shown: String = key.chars().take(KEY_PREFIX.len() + PREFIX_RANDOM_CHARS).collect();
                format!("{shown}…")
            }
            // Not a key, so not a secret: shown as given (cut short).
            KeySelector::Key(text) => format!("{:?}", text.chars().take(64).collect::<String>()),
        }
    }
}

impl KeyInfo {
    pub(crate) fn from_row(row: &AnyRow) -> Result<KeyInfo, sqlx::Error> {
        let revoked: Option<i64> = row.try_get(4)?;
        Ok(KeyInfo {
            id: row.try_get(0)?,
            account: row.try_get(1)?,
            prefix: row.try_get(2)?,
            created_at: from_unix_ms(row.try_get(3)?),
            revoked_at: revoked.map(from_unix_ms),
        })
    }
}

pub(crate) const KEY_COLUMNS: &str =
    "k.id, a.name, k.key_prefix, k.created_at_ms, k.revoked_at_ms, k.key_hash, k.account_id";

impl Ledger {
    /// Creates an API key for `account_name` and returns it. This is the only time the
    /// key exists in clear: only its SHA-256 is stored. Every gateway learns of it within
    /// 1 s ([`Change::Key`](crate::Change::Key)).
    pub async fn create_key(&self, account_name: &str) -> Result<String, LedgerError> {
        let key = new_key();
        let hash = hash_key(&key);
        let now = unix_ms(SystemTime::now());
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
        .bind(&hash)
        .bind(id)
        .bind(&key[..KEY_PREFIX.len() + PREFIX_RANDOM_CHARS])
        .bind(now)
        .execute(&mut *tx)
        .await?;
        notify::record(self, &mut tx, id, Some(&hash), now).await?;
        tx.commit().await?;
        Ok(key)
    }

    /// The keys of `account_name`, oldest first, revoked ones included.
    pub async fn keys(&self, account_name: &str) -> Result<Vec<KeyInfo>, LedgerError> {
        let mut tx = self.begin_snapshot().await?;
        let account: Option<i64> = sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
            .bind(account_name)
            .fetch_optional(&mut *tx)
            .await?;
        let account = account.ok_or_else(|| LedgerError::UnknownAccount(account_name.to_owned()))?;
        let rows = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id \
             WHERE k.account_id = $1 ORDER BY k.id"
        ))
        .bind(account)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.iter().map(KeyInfo::from_row).collect::<Result<_, _>>()?)
    }

    /// Revokes a key: from then on it authenticates nobody, on every gateway within 1 s
    /// ([`Change::Key`](crate::Change::Key)). Revoking a revoked key changes nothing
    /// (`already` is true); an unknown key or id is [`LedgerError::UnknownKey`].
    pub async fn revoke_key(&self, which: KeySelector<'_>) -> Result<Revocation, LedgerError> {
        let unknown = || LedgerError::UnknownKey(which.describe());
        let now = unix_ms(SystemTime::now());
        let mut tx = self.begin_write().await?;
        let select = format!("SELECT {KEY_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE ");
        let row = match which {
            KeySelector::Id(id) => sqlx::query(&format!("{select}k.id = $1")).bind(id).fetch_optional(&mut *tx).await?,
            KeySelector::Key(key) => {
                let Some(hash) = key_hash(key) else {
                    return Err(unknown());
                };
                sqlx::query(&format!("{select}k.key_hash = $1")).bind(hash).fetch_optional(&mut *tx).await?
            }
        };
        let row = row.ok_or_else(unknown)?;
        let mut key = KeyInfo::from_row(&row)?;
        if key.revoked_at.is_some() {
            return Ok(Revocation { key, already: true });
        }
        let hash: String = row.try_get(5)?;
        let account_id: i64 = row.try_get(6)?;
        sqlx::query("UPDATE api_keys SET revoked_at_ms = $2 WHERE id = $1")
            .bind(key.id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        notify::record(self, &mut tx, account_id, Some(&hash), now).await?;
        tx.commit().await?;
        key.revoked_at = Some(from_unix_ms(now));
        Ok(Revocation { key, already: false })
    }

    /// The account an API key belongs to, or `None` for an unknown or revoked key. One
    /// indexed query; strings that cannot be a key are refused without touching the
    /// database.
    pub async fn authenticate(&self, key: &str) -> Result<Option<AccountRef>, LedgerError> {
        match key_hash(key) {
            Some(hash) => self.authenticate_hash(&hash).await,
            None => Ok(None),
        }
    }

    /// As [`authenticate`](Self::authenticate), for a key already hashed with
    /// [`key_hash`] (what a cache keyed by hash asks).
    pub async fn authenticate_hash(&self, hash: &str) -> Result<Option<AccountRef>, LedgerError> {
        let sql = format!(
            "SELECT a.id, a.name, k.id, {}, {} FROM api_keys k JOIN accounts a ON a.id = k.account_id \
             LEFT JOIN limits kl ON kl.subject = 'key' AND kl.subject_id = k.id \
             LEFT JOIN limits al ON al.subject = 'account' AND al.subject_id = a.id \
             WHERE k.key_hash = $1 AND k.revoked_at_ms IS NULL",
            crate::limits::columns("kl"),
            crate::limits::columns("al"),
        );
        let row = sqlx::query(&sql).bind(hash).fetch_optional(&self.inner.reader).await?;
        Ok(match row {
            Some(row) => Some(AccountRef {
                id: row.try_get(0)?,
                name: row.try_get(1)?,
                limits: Some(crate::KeyLimits::from_row(&row, 2)?).filter(|l| !l.is_empty()).map(std::sync::Arc::new),
            }),
            None => None,
        })
    }
}

/// The stored form of `key` (hex SHA-256, as in [`Change::Key`](crate::Change::Key)), or
/// `None` for a string that cannot be a key (wrong prefix, over 256 bytes).
pub fn key_hash(key: &str) -> Option<String> {
    (key.starts_with(KEY_PREFIX) && key.len() <= MAX_KEY_LEN).then(|| hash_key(key))
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
        assert!(a[KEY_PREFIX.len()..].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }

    #[test]
    fn hash_is_sha256_hex_of_possible_keys_only() {
        assert_eq!(hash_key("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(key_hash("abc"), None);
        assert_eq!(key_hash(&format!("sk-sluice-{}", "x".repeat(300))), None);
        assert_eq!(key_hash("sk-sluice-abc"), Some(hash_key("sk-sluice-abc")));
    }

    #[test]
    fn selectors_never_print_a_whole_key() {
        assert_eq!(KeySelector::Id(7).describe(), "with id 7");
        let key = new_key();
        let shown = KeySelector::Key(&key).describe();
        assert_eq!(shown, format!("{}…", &key[..14]));
        assert_eq!(KeySelector::Key("sk-sluice-x").describe(), "sk-sluice-x…");
        assert_eq!(KeySelector::Key("team-a").describe(), "\"team-a\"");
    }
}
