//! An attempt's bookkeeping, in one place: its outcome goes to the upstream's health
//! (success ratio, circuit breaker, trial slot), its metrics, the SLI rollups and, for a
//! committed attempt, its span.
//!
//! A failed attempt is [`record`]ed where it fails. An attempt the request committed
//! to (its first byte arrived) is a [`Committed`] that owns what is still open (the
//! trial slot, the in-flight count, the first-byte time) until [`Committed::finish`]
//! records how the answer ended: at once for a whole body, when the relay ends for a
//! stream (it may still break).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use super::Books;
use crate::config::UpstreamHandle;
use crate::outcome::Outcome;
use crate::telemetry::traces::AttemptTrace;

/// Records an attempt's outcome in health, metrics and SLI rollups. `trial` gives back
/// the trial slot the attempt held; `retry_after` is a 429's throttling hint.
pub fn record(
    up: &UpstreamHandle,
    books: &Books,
    outcome: Outcome,
    trial: bool,
    retry_after: Option<Duration>,
    first_byte: Option<Duration>,
) {
    up.health.record(outcome, trial, retry_after, &up.cfg.circuit_breaker, &books.settings, Instant::now());
    up.metrics.attempt(outcome);
    books.sli.attempt(&up.cfg.key, outcome, first_byte.map(|d| d.as_millis() as u64));
}

/// The attempt a request committed to, until its answer ends. Finished once; dropped
/// unfinished (the request was abandoned before its answer started), it gives its
/// trial slot back so that a recovering upstream is not left without trials.
#[must_use = "a committed attempt is finished when its answer ends"]
pub struct Committed {
    upstream: Arc<UpstreamHandle>,
    trial: bool,
    first_byte: Duration,
    _in_flight: InFlight,
    trace: AttemptTrace,
    finished: bool,
}

impl Committed {
    pub(crate) fn new(
        upstream: Arc<UpstreamHandle>,
        trial: bool,
        first_byte: Duration,
        in_flight: InFlight,
        trace: AttemptTrace,
    ) -> Self {
        Self { upstream, trial, first_byte, _in_flight: in_flight, trace, finished: false }
    }

    /// The upstream that answered.
    pub fn upstream(&self) -> &Arc<UpstreamHandle> {
        &self.upstream
    }

    /// Time from sending the request to the first body byte.
    pub fn first_byte(&self) -> Duration {
        self.first_byte
    }

    /// Records how the answer ended (with its trial slot and first-byte time), ends
    /// the attempt's span with that outcome and leaves the upstream's in-flight count.
    pub fn finish(mut self, outcome: Outcome, books: &Books) {
        self.finished = true;
        record(&self.upstream, books, outcome, self.trial, None, Some(self.first_byte));
        self.trace.outcome(outcome, false);
    }
}

impl Drop for Committed {
    fn drop(&mut self) {
        if !self.finished && self.trial {
            self.upstream.health.cancel_trial();
        }
    }
}

/// Counts a request in flight on an upstream while alive.
pub struct InFlight(Arc<AtomicU32>);

impl InFlight {
    /// Increments the counter.
    pub fn enter(counter: &Arc<AtomicU32>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
