//! Limits on keys and accounts (docs/design.md §5b): requests and tokens per minute,
//! tokens per day, concurrent requests, and spend per UTC day and month, each held
//! exactly across any number of gateway processes by leases ([`limiter`]).
//!
//! This module is the stored side: the values ([`Limits`]), what changes them
//! ([`LimitsUpdate`], from `admin key update` and `admin account update`), and each
//! meter's window ([`Meter::window`]). A change is recorded in the change feed like a
//! key change, so every gateway reloads it within 1 s.

use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::error::LedgerError;
use crate::keys::{KeyInfo, KeySelector};
use crate::ledger::{Ledger, unix_ms};
use crate::notify;

pub mod limiter;
mod store;

pub use limiter::{Admission, Ask, LimitError, Limiter, LimiterConfig, LimiterObserver, Refusal, Standing};

/// What a limit applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Subject {
    /// One API key (its id).
    Key(i64),
    /// An account (its id): every key of it together.
    Account(i64),
}

impl Subject {
    /// `"key"` or `"account"`: the stored form and the metric label.
    pub fn kind(self) -> &'static str {
        match self {
            Subject::Key(_) => "key",
            Subject::Account(_) => "account",
        }
    }

    /// The key's or account's id.
    pub fn id(self) -> i64 {
        match self {
            Subject::Key(id) | Subject::Account(id) => id,
        }
    }
}

/// One kind of limit, counted in its own window (serialised as [`Meter::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(into = "&'static str")]
pub enum Meter {
    /// Requests per minute (sliding).
    Requests,
    /// Input plus output tokens per minute (sliding).
    Tokens,
    /// Input plus output tokens per day (sliding, 24 h).
    DailyTokens,
    /// Requests in flight at once.
    Concurrency,
    /// Spend (nanodollars) per UTC calendar day.
    DailySpend,
    /// Spend (nanodollars) per UTC calendar month.
    MonthlySpend,
}

impl From<Meter> for &'static str {
    fn from(m: Meter) -> &'static str {
        m.as_str()
    }
}

/// A meter's window at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Unix ms it began (0 for concurrency, which has no window).
    pub start_ms: i64,
    /// Unix ms it ends (`i64::MAX` for concurrency).
    pub end_ms: i64,
    /// Whether the previous window still counts, weighted by how much of it lies within
    /// the last window length (docs/design.md §5b): a burst is paced, not let through
    /// twice across a window edge.
    pub sliding: bool,
}

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

impl Meter {
    /// Every meter, in the order a request is checked against them.
    pub const ALL: [Meter; 6] = [
        Meter::Concurrency,
        Meter::Requests,
        Meter::Tokens,
        Meter::DailyTokens,
        Meter::DailySpend,
        Meter::MonthlySpend,
    ];

    /// The stored name, the CLI flag and the metric label: `rpm`, `tpm`, `tpd`,
    /// `concurrency`, `daily_spend`, `monthly_spend`.
    pub fn as_str(self) -> &'static str {
        match self {
            Meter::Requests => "rpm",
            Meter::Tokens => "tpm",
            Meter::DailyTokens => "tpd",
            Meter::Concurrency => "concurrency",
            Meter::DailySpend => "daily_spend",
            Meter::MonthlySpend => "monthly_spend",
        }
    }

    /// The `limits` column.
    fn column(self) -> &'static str {
        match self {
            Meter::DailySpend => "daily_spend_nanos",
            Meter::MonthlySpend => "monthly_spend_nanos",
            other => other.as_str(),
        }
    }

    /// Whether it counts money (a spend cap: `insufficient_quota` when reached).
    pub fn is_spend(self) -> bool {
        matches!(self, Meter::DailySpend | Meter::MonthlySpend)
    }

    /// The window that holds `now_ms`.
    pub fn window(self, now_ms: i64) -> Window {
        let fixed = |len: i64, sliding| {
            let start = now_ms - now_ms.rem_euclid(len);
            Window { start_ms: start, end_ms: start + len, sliding }
        };
        match self {
            Meter::Requests | Meter::Tokens => fixed(MINUTE_MS, true),
            Meter::DailyTokens => fixed(DAY_MS, true),
            Meter::DailySpend => fixed(DAY_MS, false),
            Meter::Concurrency => Window { start_ms: 0, end_ms: i64::MAX, sliding: false },
            Meter::MonthlySpend => month(now_ms),
        }
    }
}

/// The UTC calendar month holding `now_ms`.
fn month(now_ms: i64) -> Window {
    let start_of = |date: jiff::civil::Date| {
        date.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp().as_millisecond()).unwrap_or(now_ms)
    };
    let now = jiff::Timestamp::from_millisecond(now_ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let first = now.to_zoned(jiff::tz::TimeZone::UTC).date().first_of_month();
    let next = first.checked_add(jiff::Span::new().months(1)).unwrap_or(first);
    Window { start_ms: start_of(first), end_ms: start_of(next), sliding: false }
}

impl Window {
    /// Length in ms.
    pub fn len_ms(&self) -> i64 {
        self.end_ms.saturating_sub(self.start_ms)
    }

    /// Where the window before this one began (sliding windows).
    pub fn prev_start_ms(&self) -> i64 {
        self.start_ms - self.len_ms()
    }

    /// What may be in use in this window at `now_ms`: the limit, less (for a sliding
    /// window) the previous window's use weighted by the part of it that still lies
    /// within one window length of `now_ms`.
    pub fn allowance(&self, limit: i64, prev: i64, now_ms: i64) -> i64 {
        if !self.sliding || prev <= 0 {
            return limit;
        }
        let len = i128::from(self.len_ms().max(1));
        let left = i128::from((self.end_ms - now_ms).clamp(0, self.len_ms()));
        // Rounded up: the previous window's use is never under-counted.
        let weighted = (i128::from(prev) * left + len - 1) / len;
        limit - i64::try_from(weighted).unwrap_or(i64::MAX)
    }

    /// How long until `deficit` more is allowed, given the previous window's use `prev`
    /// (the rate a sliding window's allowance grows at); at most until the window ends.
    pub fn wait_ms(&self, deficit: i64, prev: i64, now_ms: i64) -> i64 {
        let to_end = (self.end_ms - now_ms).max(1);
        if !self.sliding || prev <= 0 || deficit <= 0 {
            return if deficit <= 0 { 0 } else { to_end };
        }
        let per = i128::from(self.len_ms()) * i128::from(deficit);
        let wait = (per + i128::from(prev) - 1) / i128::from(prev);
        i64::try_from(wait).unwrap_or(i64::MAX).clamp(1, to_end)
    }
}

/// The limits of one key or account; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Requests per minute.
    pub rpm: Option<i64>,
    /// Input plus output tokens per minute.
    pub tpm: Option<i64>,
    /// Input plus output tokens per day.
    pub tpd: Option<i64>,
    /// Requests in flight at once.
    pub concurrency: Option<i64>,
    /// Spend per UTC day, nanodollars.
    pub daily_spend_nanos: Option<i64>,
    /// Spend per UTC month, nanodollars.
    pub monthly_spend_nanos: Option<i64>,
}

impl Limits {
    /// The limit of `meter`.
    pub fn get(&self, meter: Meter) -> Option<i64> {
        match meter {
            Meter::Requests => self.rpm,
            Meter::Tokens => self.tpm,
            Meter::DailyTokens => self.tpd,
            Meter::Concurrency => self.concurrency,
            Meter::DailySpend => self.daily_spend_nanos,
            Meter::MonthlySpend => self.monthly_spend_nanos,
        }
    }

    fn slot(&mut self, meter: Meter) -> &mut Option<i64> {
        match meter {
            Meter::Requests => &mut self.rpm,
            Meter::Tokens => &mut self.tpm,
            Meter::DailyTokens => &mut self.tpd,
            Meter::Concurrency => &mut self.concurrency,
            Meter::DailySpend => &mut self.daily_spend_nanos,
            Meter::MonthlySpend => &mut self.monthly_spend_nanos,
        }
    }

    /// Whether nothing is limited.
    pub fn is_empty(&self) -> bool {
        Meter::ALL.iter().all(|m| self.get(*m).is_none())
    }

    fn from_row(row: &AnyRow, first: usize) -> Result<Limits, sqlx::Error> {
        let mut limits = Limits::default();
        for (i, meter) in STORED_ORDER.iter().enumerate() {
            *limits.slot(*meter) = row.try_get(first + i)?;
        }
        Ok(limits)
    }
}

/// The order of the `limits` columns in every SELECT here.
const STORED_ORDER: [Meter; 6] =
    [Meter::Requests, Meter::Tokens, Meter::DailyTokens, Meter::Concurrency, Meter::DailySpend, Meter::MonthlySpend];

/// `l.rpm, l.tpm, …` for a `limits` row aliased `alias`.
pub(crate) fn columns(alias: &str) -> String {
    STORED_ORDER.iter().map(|m| format!("{alias}.{}", m.column())).collect::<Vec<_>>().join(", ")
}

/// The limits an API key's requests are held to: its own and its account's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KeyLimits {
    /// The key's id.
    pub key_id: i64,
    /// The key's own limits.
    pub key: Limits,
    /// Its account's limits (shared by all the account's keys).
    pub account: Limits,
}

impl KeyLimits {
    /// Reads the key's and the account's limits from a row, at column `first`
    /// (the key's id, then [`columns`] twice).
    pub(crate) fn from_row(row: &AnyRow, first: usize) -> Result<KeyLimits, sqlx::Error> {
        Ok(KeyLimits {
            key_id: row.try_get(first)?,
            key: Limits::from_row(row, first + 1)?,
            account: Limits::from_row(row, first + 1 + STORED_ORDER.len())?,
        })
    }

    /// Whether neither the key nor its account is limited.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty() && self.account.is_empty()
    }
}

/// One limit's new value in a [`LimitsUpdate`]: `none` (or `off`) removes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting(pub Option<i64>);

impl FromStr for Setting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" | "off" => Ok(Setting(None)),
            n => match n.replace('_', "").parse::<i64>() {
                Ok(v) if v > 0 => Ok(Setting(Some(v))),
                _ => Err(format!("{s:?} is not a positive whole number (or `none` to remove the limit)")),
            },
        }
    }
}

/// What to change of a subject's limits: the meters named, each set or removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitsUpdate(pub Vec<(Meter, Option<i64>)>);

impl LimitsUpdate {
    fn apply(&self, mut limits: Limits) -> Limits {
        for (meter, value) in &self.0 {
            *limits.slot(*meter) = *value;
        }
        limits
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set: Vec<String> = Meter::ALL
            .iter()
            .filter_map(|m| self.get(*m).map(|v| (m, v)))
            .map(|(m, v)| match m.is_spend() {
                true => format!("{} {} USD", m.as_str(), crate::format_usd(v)),
                false => format!("{} {v}", m.as_str()),
            })
            .collect();
        if set.is_empty() { f.write_str("none") } else { f.write_str(&set.join(", ")) }
    }
}

/// One meter's current use, as `admin key show` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MeterUse {
    /// Which meter.
    pub meter: Meter,
    /// The limit.
    pub limit: i64,
    /// In use in the current window (what leases hold counts whole until returned).
    pub used: i64,
    /// What the window allows now (the limit, less the weighted previous window).
    pub allowance: i64,
    /// When the current window ends (unix ms).
    pub window_end_ms: i64,
}

impl Ledger {
    /// Changes a key's limits and returns the key and its limits after. Every gateway
    /// holds its requests to them within 1 s.
    pub async fn update_key_limits(
        &self,
        which: KeySelector<'_>,
        update: &LimitsUpdate,
    ) -> Result<(KeyInfo, Limits), LedgerError> {
        let (key, hash, account_id) = self.find_key(which).await?;
        let limits = self.write_limits(Subject::Key(key.id), account_id, Some(&hash), update).await?;
        Ok((key, limits))
    }

    /// Changes an account's limits (shared by all its keys) and returns them after.
    pub async fn update_account_limits(&self, name: &str, update: &LimitsUpdate) -> Result<Limits, LedgerError> {
        let id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.inner.reader)
            .await?
            .ok_or_else(|| LedgerError::UnknownAccount(name.to_owned()))?;
        self.write_limits(Subject::Account(id), id, None, update).await
    }

    async fn write_limits(
        &self,
        subject: Subject,
        account_id: i64,
        key_hash: Option<&str>,
        update: &LimitsUpdate,
    ) -> Result<Limits, LedgerError> {
        let now = unix_ms(SystemTime::now());
        let mut tx = self.begin_write().await?;
        let row =
            sqlx::query(&format!("SELECT {} FROM limits l WHERE l.subject = $1 AND l.subject_id = $2", columns("l")))
                .bind(subject.kind())
                .bind(subject.id())
                .fetch_optional(&mut *tx)
                .await?;
        let before = match row {
            Some(row) => Limits::from_row(&row, 0)?,
            None => Limits::default(),
        };
        let after = update.apply(before);
        let names: Vec<&str> = STORED_ORDER.iter().map(|m| m.column()).collect();
        let sets: Vec<String> = names.iter().map(|c| format!("{c} = excluded.{c}")).collect();
        let sql = format!(
            "INSERT INTO limits (subject, subject_id, {}, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (subject, subject_id) DO UPDATE SET {}, updated_at_ms = excluded.updated_at_ms",
            names.join(", "),
            sets.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(subject.kind()).bind(subject.id());
        for meter in STORED_ORDER {
            query = query.bind(after.get(meter));
        }
        query.bind(now).execute(&mut *tx).await?;
        notify::record(self, &mut tx, account_id, key_hash, now).await?;
        tx.commit().await?;
        Ok(after)
    }

    /// The limits of `subject` (all `None` when it has none).
    pub async fn limits(&self, subject: Subject) -> Result<Limits, LedgerError> {
        let row =
            sqlx::query(&format!("SELECT {} FROM limits l WHERE l.subject = $1 AND l.subject_id = $2", columns("l")))
                .bind(subject.kind())
                .bind(subject.id())
                .fetch_optional(&self.inner.reader)
                .await?;
        Ok(match row {
            Some(row) => Limits::from_row(&row, 0)?,
            None => Limits::default(),
        })
    }

    /// What `subject` uses of each of its limits at `now`, over every gateway.
    pub async fn limit_use(&self, subject: Subject, now: SystemTime) -> Result<Vec<MeterUse>, LedgerError> {
        let now_ms = unix_ms(now);
        let limits = self.limits(subject).await?;
        let mut out = Vec::new();
        for meter in Meter::ALL {
            let Some(limit) = limits.get(meter) else { continue };
            let window = meter.window(now_ms);
            let (used, prev) = self.window_use(subject, meter, &window).await?;
            out.push(MeterUse {
                meter,
                limit,
                used,
                allowance: window.allowance(limit, prev, now_ms),
                window_end_ms: window.end_ms,
            });
        }
        Ok(out)
    }

    /// A key, revoked or not, by the whole key or its id, and its account's id (what
    /// [`Subject::Account`] takes): what `admin key show` reads. An unknown key is
    /// [`LedgerError::UnknownKey`].
    pub async fn key(&self, which: KeySelector<'_>) -> Result<(KeyInfo, i64), LedgerError> {
        let (key, _hash, account_id) = self.find_key(which).await?;
        Ok((key, account_id))
    }

    /// A key, its hash and its account's id.
    async fn find_key(&self, which: KeySelector<'_>) -> Result<(KeyInfo, String, i64), LedgerError> {
        let unknown = || LedgerError::UnknownKey(which.describe());
        let select = format!(
            "SELECT {} FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE ",
            crate::keys::KEY_COLUMNS
        );
        let row = match which {
            KeySelector::Id(id) => {
                sqlx::query(&format!("{select}k.id = $1")).bind(id).fetch_optional(&self.inner.reader).await?
            }
            KeySelector::Key(key) => {
                let Some(hash) = crate::key_hash(key) else { return Err(unknown()) };
                sqlx::query(&format!("{select}k.key_hash = $1")).bind(hash).fetch_optional(&self.inner.reader).await?
            }
        };
        let row = row.ok_or_else(unknown)?;
        Ok((KeyInfo::from_row(&row)?, row.try_get(5)?, row.try_get(6)?))
    }
}

#[cfg(test)]
mod tests;
