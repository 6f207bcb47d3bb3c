//! Reservations (docs/design.md §5): hold an estimate before the upstream call, then settle
//! the actual cost or release it. The hold is what makes overdraft impossible.
//!
//! Charging rule: a settlement charges `min(actual, reserved amount)` and releases the
//! rest. A cost above the reservation is *not* taken from the free balance (that could
//! push `balance − reserved` below zero under concurrency); the excess is recorded as
//! `uncollected` in the reservation row and the journal, so it is visible and billable
//! out of band. It happens only when an estimate undercounts: an upstream reporting more
//! output than `max_tokens`, or a failover to a candidate pricier than the one the
//! estimate used (so the gateway should estimate with the highest candidate price).
//!
//! Every transition is keyed by the reservation id and guarded by its state
//! (`open` → `settled` | `released` | `expired`), so a second settle, a settle after a
//! release or after the reaper, or a release racing a settle, never moves money twice.

use std::time::SystemTime;

use serde::Serialize;

use crate::error::LedgerError;
use crate::ledger::Ledger;

mod postgres;
mod store;

/// An open hold on an account's money. Settle it with [`Reservation::settle`] or give it
/// back with [`Reservation::release`]. Dropping it unsettled logs a warning, counts in
/// [`Ledger::dropped_reservations`] and releases it in the background (or, outside a
/// tokio runtime, leaves it to [`Ledger::reap_expired`]).
#[must_use = "a reservation must be settled or released"]
#[derive(Debug)]
pub struct Reservation {
    ledger: Ledger,
    id: i64,
    account_id: i64,
    amount_nanos: i64,
    request_id: String,
    expires_at: SystemTime,
    armed: bool,
}

/// Token usage reported by the upstream, stored with the settlement for audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Web searches the provider ran for the answer, billed per search (docs/design.md §5).
    pub web_searches: u64,
    /// The Upstream that served the request, if any.
    pub upstream: Option<String>,
}

/// What a settle call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SettleOutcome {
    /// This call charged the account.
    Settled,
    /// An earlier call settled it; nothing was charged now (the amounts are the earlier ones).
    AlreadySettled,
    /// It had been released or expired first; nothing was charged. The charge asked for
    /// is recorded once as uncollected.
    AfterRelease,
}

/// The result of settling a reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Settlement {
    /// The reservation.
    pub reservation_id: i64,
    /// See [`SettleOutcome`].
    pub outcome: SettleOutcome,
    /// Taken from the balance: `min(actual, reserved amount)`.
    pub charged_nanos: i64,
    /// Given back to the free balance: `reserved amount − charged`.
    pub released_nanos: i64,
    /// Actual cost that could not be charged.
    pub uncollected_nanos: i64,
}

impl Reservation {
    /// Database id of the reservation.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The account it holds money of.
    pub fn account_id(&self) -> i64 {
        self.account_id
    }

    /// The amount held, nanodollars.
    pub fn amount_nanos(&self) -> i64 {
        self.amount_nanos
    }

    /// The request it was made for.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// When the reaper may release it.
    pub fn expires_at(&self) -> SystemTime {
        self.expires_at
    }

    /// Charges the actual cost (capped at the reserved amount, see the module docs) and
    /// releases the rest. If this fails the reservation stays open until it expires.
    pub async fn settle(mut self, charge_nanos: i64, usage: Usage) -> Result<Settlement, LedgerError> {
        // Stay armed across the await: if this future is dropped mid-way, Drop releases
        // (a no-op if the settle had committed).
        let result = self.ledger.settle_reservation(self.id, charge_nanos, &usage).await;
        self.armed = false;
        result
    }

    /// Releases the whole amount (failure before any output). Returns `false` when it had
    /// already been settled, released or expired.
    pub async fn release(mut self) -> Result<bool, LedgerError> {
        let result = self.ledger.release_reservation(self.id).await;
        self.armed = false;
        result
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.ledger.inner.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            reservation_id = self.id,
            request_id = %self.request_id,
            amount_nanos = self.amount_nanos,
            "reservation dropped without settle or release; releasing it"
        );
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(reservation_id = self.id, "no tokio runtime to release it; the reaper will after expiry");
            return;
        };
        let ledger = self.ledger.clone();
        let id = self.id;
        runtime.spawn(async move {
            if let Err(error) = ledger.release_reservation(id).await {
                tracing::warn!(reservation_id = id, %error, "releasing a dropped reservation failed");
            }
        });
    }
}
