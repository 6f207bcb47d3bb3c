//! Pure status computation: from resolve problems, ledger rollups and heartbeats to
//! `UpstreamStatus`, `ModelRouteStatus` and `ErrorBudgetStatus`; and `AccountLimitStatus`
//! from what the AccountLimit reconciler did ([`limits`]).
//!
//! Every function takes the previous status, so that condition transition times and
//! values the ledger could not refresh are carried over. Nothing here does I/O; the
//! ledger is read by [`crate::observe`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use sluice_crds::upstream::CircuitState;
use sluice_ledger::{Heartbeat, RouteMinute, UpstreamMinute};

pub mod budget;
pub mod conditions;
pub mod format;
pub mod limits;
pub mod route;
pub mod upstream;

pub use sluice_ledger::budget::unix_minute;

/// How far back the `…5m` figures look.
pub const STATUS_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Heartbeats older than this are ignored for circuit states and weights.
pub const HEARTBEAT_FRESHNESS: Duration = Duration::from_secs(60);

/// What the ledger says about some routes and upstreams, at `now`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observations {
    /// Route minutes of the last 5 minutes (the current, partial minute included).
    pub route_minutes: Vec<RouteMinute>,
    /// Upstream minutes of the same window.
    pub upstream_minutes: Vec<UpstreamMinute>,
    /// Heartbeats younger than [`HEARTBEAT_FRESHNESS`].
    pub heartbeats: Vec<Heartbeat>,
}

/// An upstream's attempts over the window, summed over minutes and pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpstreamTotals {
    /// All attempts.
    pub attempts: u64,
    /// Attempts with outcome `ok`.
    pub ok: u64,
    /// Attempts with outcome `http_4xx` (client errors: neither success nor failure).
    pub client_errors: u64,
    /// First-byte histogram.
    pub first_byte: [u64; sluice_ledger::LATENCY_BUCKET_COUNT],
    /// The newest minute with a failure, and its most frequent failure outcome.
    pub last_failure: Option<(i64, String)>,
}

impl Observations {
    /// Sums an upstream's minutes.
    pub fn upstream(&self, key: &str) -> UpstreamTotals {
        let mut t = UpstreamTotals::default();
        for m in self.upstream_minutes.iter().filter(|m| m.upstream == key) {
            t.attempts += m.attempts();
            t.ok += m.attempts_by_outcome.get("ok").copied().unwrap_or(0);
            t.client_errors += m.attempts_by_outcome.get("http_4xx").copied().unwrap_or(0);
            for (sum, n) in t.first_byte.iter_mut().zip(m.first_byte_buckets) {
                *sum += n;
            }
            // Ties go to the first outcome in the contract's order.
            let worst = sluice_ledger::UPSTREAM_OUTCOMES
                .iter()
                .filter(|o| !matches!(**o, "ok" | "http_4xx"))
                .map(|o| (m.attempts_by_outcome.get(*o).copied().unwrap_or(0), *o))
                .filter(|(n, _)| *n > 0)
                .fold(None::<(u64, &str)>, |best, (n, o)| match best {
                    Some((bn, _)) if bn >= n => best,
                    _ => Some((n, o)),
                });
            if let Some((_, outcome)) = worst
                && t.last_failure.as_ref().is_none_or(|(minute, _)| *minute <= m.minute)
            {
                t.last_failure = Some((m.minute, outcome.to_string()));
            }
        }
        t
    }

    /// A route's (total, bad, failovers) over the window.
    pub fn route(&self, key: &str) -> (u64, u64, u64) {
        self.route_minutes
            .iter()
            .filter(|m| m.route == key)
            .fold((0, 0, 0), |(t, b, f), m| (t + m.total, b + m.bad, f + m.failovers))
    }

    /// The worst circuit state any fresh heartbeat reports for an upstream; `None` when
    /// no pod reported it.
    pub fn circuit(&self, key: &str) -> Option<CircuitState> {
        self.heartbeats
            .iter()
            .flat_map(|h| h.upstreams.iter())
            .filter(|u| u.upstream == key)
            .filter_map(|u| match u.circuit.as_str() {
                "Closed" => Some(CircuitState::Closed),
                "HalfOpen" => Some(CircuitState::HalfOpen),
                "Open" => Some(CircuitState::Open),
                _ => None,
            })
            .max_by_key(|c| circuit_rank(*c))
    }

    /// Recent success ratio of an upstream across fresh heartbeats (successes over
    /// judged attempts); `None` when no pod has data.
    pub fn recent_ratio(&self, key: &str) -> Option<f64> {
        let (ok, failed) = self
            .heartbeats
            .iter()
            .flat_map(|h| h.upstreams.iter())
            .filter(|u| u.upstream == key)
            .fold((0u64, 0u64), |(s, f), u| (s + u.successes, f + u.failures));
        let judged = ok + failed;
        (judged > 0).then(|| ok as f64 / judged as f64)
    }

    /// How many fresh heartbeats report an upstream, and how many of them as open.
    pub fn open_in(&self, key: &str) -> (usize, usize) {
        let states: Vec<&str> = self
            .heartbeats
            .iter()
            .flat_map(|h| h.upstreams.iter())
            .filter(|u| u.upstream == key)
            .map(|u| u.circuit.as_str())
            .collect();
        (states.len(), states.iter().filter(|s| **s == "Open").count())
    }
}

/// Closed < HalfOpen < Open.
pub fn circuit_rank(state: CircuitState) -> u8 {
    match state {
        CircuitState::Closed => 0,
        CircuitState::HalfOpen => 1,
        CircuitState::Open => 2,
    }
}

/// `(from, to)` minutes of the status window ending at `now` (5 minutes, the current
/// partial one included).
pub fn window_minutes(now: SystemTime) -> (i64, i64) {
    let to = unix_minute(now);
    (to - (STATUS_WINDOW.as_secs() as i64 / 60) + 1, to)
}

/// Events a status change calls for (emitted by the reconcilers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// `Warning` or `Normal`.
    pub warning: bool,
    /// Event reason, e.g. `CircuitOpened`.
    pub reason: &'static str,
    /// Human-readable note.
    pub note: String,
}

/// Sorted map helper for tests and callers that build burn-rate maps.
pub type BurnRates = BTreeMap<String, String>;
