//! sluice-ledger: money and SLI storage for sluice (docs/design.md §5).
//!
//! # Where to start
//!
//! - [`Ledger::connect`] opens a `sqlite://PATH` or `postgres://…` store and runs the
//!   embedded migrations (`migrations/sqlite`, `migrations/postgres`). A [`Ledger`] is a
//!   cheap clone (an `Arc`) meant to be shared by every task of a process.
//! - Money is an `i64` number of **nanodollars** (1e-9 USD) everywhere; [`parse_usd`] and
//!   [`format_usd`] convert at the edges.
//! - Wallets: [`Ledger::create_account`], [`Ledger::topup`], [`Ledger::create_key`],
//!   [`Ledger::keys`], [`Ledger::revoke_key`] and the hot-path [`Ledger::authenticate`].
//!   [`Ledger::changes`] tells every process of top-ups and key changes within 1 s, so
//!   that what they cache stays true (`notify.rs`).
//! - Balance grants (docs/design.md §5a): a [`Biller`] per process holds a grant per
//!   account and serves reservations from it in memory; settlements are committed in
//!   batches. Start at `grant.rs`.
//! - Billing: [`Ledger::reserve`] returns a [`Reservation`] guard that must be
//!   [settled](Reservation::settle) or [released](Reservation::release). The invariant
//!   `balance − reserved ≥ 0` holds at every instant, on both databases, under any
//!   concurrency; [`Ledger::reap_expired`] cleans up after crashed processes. Every change
//!   of money is a row in the append-only journal, checked by [`Ledger::journal_verify`].
//! - SLIs: the gateway adds per-minute [`RouteMinute`]/[`UpstreamMinute`] rollups with
//!   [`Ledger::write_rollups`] (a route's per inbound API) and a [`Heartbeat`] per
//!   process; the operator reads them back, a route's APIs summed, and feeds them to the
//!   pure error-budget maths in [`budget`].
//! - [`cli`] is the `sluice-gateway admin …` command set.
//! - `testing` (feature `test-support`) is the test database and polling helper that
//!   every crate's tests share.
//!
//! SQL lives next to the code that uses it and is written once for both databases
//! (`$N` placeholders, `ON CONFLICT`, `RETURNING`), executed through sqlx's `Any` driver.

mod accounts;
pub mod budget;
pub mod cli;
mod error;
pub mod grant;
mod heartbeat;
mod journal;
mod keys;
mod ledger;
pub mod limits;
mod money;
mod notify;
mod reservation;
mod rollup;
mod status_read;
mod synthetic;
#[cfg(feature = "test-support")]
pub mod testing;

pub use accounts::{Account, AccountRef};
pub use error::LedgerError;
pub use grant::{Billed, Biller, BillerConfig, BillerObserver, Hold, RenewalResult};
pub use heartbeat::{Heartbeat, UpstreamHeartbeat};
pub use journal::JournalCheck;
pub use keys::{KEY_PREFIX, KeyInfo, KeySelector, Revocation, key_hash};
pub use ledger::Ledger;
pub use limits::{KeyLimits, Limits, LimitsUpdate, Meter, MeterUse, Setting, Subject};
pub use money::{NANOS_PER_USD, UsdError, format_usd, parse_usd};
pub use notify::Change;
pub use reservation::{Reservation, SettleOutcome, Settlement, Usage};
pub use rollup::{
    ALL_APIS, LATENCY_BUCKET_COUNT, LATENCY_BUCKETS_MS, RouteMinute, UPSTREAM_OUTCOMES, UpstreamMinute,
    latency_bucket_index,
};
pub use status_read::{RouteCount, StoredCheck};
pub use synthetic::{SYNTHETIC_ACCOUNT, SYNTHETIC_RETENTION, SyntheticCheck};
