//! Error-budget maths (docs/design.md §2 ErrorBudget): pure functions from a policy and
//! per-minute route rollups to what `status` and `sluice-gateway budgets` show.
//!
//! Start at [`evaluate`]; [`evaluate_minutes`] is the same over minutes already summed
//! across the routes (what [`Ledger::budget_minutes`](crate::Ledger::budget_minutes)
//! reads, the histogram reduced to slow and not slow in the database).
//! [`Ledger::evaluate_budget`](crate::Ledger::evaluate_budget) runs it for a resolved
//! ErrorBudget resource (its policy is `BudgetPolicy::from(&BudgetConfig)`) over the
//! rollups in the ledger.
//!
//! Definitions, all over whole unix minutes; a window of length `L` ending at
//! `now_minute` covers the minutes `now_minute − L + 1 ..= now_minute`:
//!
//! - **Events.** A request is bad when it was bad by status (`RouteMinute::bad`) or,
//!   with a latency SLI, slower than the threshold. Latency comes from the histogram
//!   of [`RouteMinute::latency_buckets`]; the threshold is **rounded up to the next
//!   bucket boundary** of [`LATENCY_BUCKETS_MS`](crate::LATENCY_BUCKETS_MS) (a 12 s
//!   threshold is judged at 15 s; above 60 s nothing counts as slow).
//! - **Occurrences.** Budget = allowed bad events = total × (1 − objective), shown
//!   rounded down; consumed = bad events. The latency percentile is not used.
//! - **Timeslices.** Slices of `timeslice` (default 1m) are aligned to end at
//!   `now_minute`. A slice with traffic is bad when its status error ratio exceeds
//!   1 − objective or, with a latency SLI, when more than (100 − percentile)% of its
//!   other requests are slower than the threshold (its percentile latency exceeds the
//!   threshold). Slices without traffic are neither good nor bad. Budget = window ×
//!   (1 − objective) as a duration (99.95% over 30d = `21m36s`); consumed = bad slices
//!   × slice length. `good_events`/`total_events` still count requests.
//! - **Burn rate** over a window = error ratio ÷ (1 − objective). For occurrences the
//!   error ratio is bad ÷ total events; for timeslices it is bad time ÷ window length
//!   (a slice counts when its newest minute is in the window, capped at the window).
//!   No traffic gives 0.
//! - **Alerts** fire when the burn rate over both the long and the short window is
//!   strictly above the alert's rate. Exhausted when consumed ≥ 100% (there must be
//!   traffic), else Burning when any alert fires, else Healthy.
//!
//! Comparisons are done in integers (objective and percentiles to 1e-9, burn-rate
//! thresholds to 1e-3), so boundary cases behave as the decimal strings say.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::rollup::{RouteMinute, latency_bucket_index};
use format::{format_tenths, round_div};
use series::{PPB, Series, Validated, whole_minutes};

mod format;
mod resource;
mod series;
#[cfg(test)]
mod tests;

pub use format::format_duration;
pub use resource::{EvaluateError, unix_minute};
pub use series::{MinuteCounts, MinuteSeries};

/// The burn-rate windows every report shows, by label.
pub const BURN_RATE_WINDOWS: [(&str, i64); 4] = [("5m", 5), ("1h", 60), ("6h", 360), ("3d", 3 * 1440)];

/// An SLO over some routes, as the ErrorBudget resource states it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetPolicy {
    /// Target good ratio, e.g. 0.9995 for "99.95"; 0.5 < objective < 1.
    pub objective: f64,
    /// Rolling window, whole minutes (1h..90d in the CRD).
    pub window: Duration,
    /// How bad events are counted.
    pub method: BudgetMethod,
    /// Slice length for timeslices, whole minutes dividing the window; default 1m.
    pub timeslice: Option<Duration>,
    /// Optional latency SLI.
    pub latency: Option<LatencySli>,
    /// Multi-window burn-rate alerts (see [`AlertPolicy::sre_workbook_defaults`]).
    pub alerts: Vec<AlertPolicy>,
}

/// Occurrences (count requests) or timeslices (count bad minutes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BudgetMethod {
    /// Budget in bad events.
    Occurrences,
    /// Budget in time.
    Timeslices,
}

/// "Requests must be faster than `threshold_ms` at the `percentile`".
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencySli {
    /// Threshold in milliseconds (rounded up to a bucket boundary).
    pub threshold_ms: u64,
    /// Percentile in percent, 0 < p < 100 (timeslices only).
    pub percentile: f64,
}

/// One multi-window burn-rate alert.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlertPolicy {
    /// Name reported in `firing_alerts` (several tiers may share one).
    pub name: String,
    /// Long window.
    pub long: Duration,
    /// Short window.
    pub short: Duration,
    /// Burn rate both windows must exceed.
    pub burn_rate: f64,
}

/// Overall verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BudgetState {
    /// No alert fires and budget is left.
    Healthy,
    /// At least one alert fires.
    Burning,
    /// Consumed ≥ 100%.
    Exhausted,
}

/// What an ErrorBudget's status shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    /// `"21m36s"` (timeslices) or allowed bad events (occurrences; a fraction under ten
    /// with one decimal, `"0.4"`).
    pub budget: String,
    /// `"5m"` (timeslices) or bad events (occurrences).
    pub consumed: String,
    /// Consumed share of the budget, one decimal (may exceed 100).
    pub consumed_percent: String,
    /// 100 − consumed, one decimal (negative when overspent).
    pub remaining_percent: String,
    /// Burn rate by window label (see [`BURN_RATE_WINDOWS`]), one decimal.
    pub burn_rates: BTreeMap<String, String>,
    /// Requests in the window that were not bad.
    pub good_events: u64,
    /// Requests in the window that count for the SLO.
    pub total_events: u64,
    /// Names of firing alerts, in policy order, without duplicates.
    pub firing_alerts: Vec<String>,
    /// Verdict.
    pub state: BudgetState,
}

/// A policy that cannot be evaluated; messages name the field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// Objective out of (0.5, 1).
    #[error("objective {0} must be between 0.5 and 1 (exclusive), e.g. 0.9995")]
    Objective(f64),
    /// Window not a positive whole number of minutes.
    #[error("window {0:?} must be a positive whole number of minutes")]
    Window(Duration),
    /// Bad slice length.
    #[error("timeslice {timeslice:?} must be a positive whole number of minutes dividing the window {window:?}")]
    Timeslice {
        /// The slice length.
        timeslice: Duration,
        /// The window.
        window: Duration,
    },
    /// Percentile out of (0, 100).
    #[error("latency percentile {0} must be between 0 and 100 (exclusive)")]
    Percentile(f64),
    /// Bad alert windows or rate.
    #[error("alert {name:?}: {reason}")]
    Alert {
        /// The alert name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl AlertPolicy {
    /// The Google SRE workbook tiers: page 1h/5m at 14.4, page 6h/30m at 6, ticket
    /// 3d/6h at 1.
    pub fn sre_workbook_defaults() -> Vec<AlertPolicy> {
        let tier = |name: &str, long_m: u64, short_m: u64, burn_rate| AlertPolicy {
            name: name.to_owned(),
            long: Duration::from_secs(long_m * 60),
            short: Duration::from_secs(short_m * 60),
            burn_rate,
        };
        vec![tier("page", 60, 5, 14.4), tier("page", 360, 30, 6.0), tier("ticket", 3 * 1440, 360, 1.0)]
    }
}

impl BudgetPolicy {
    /// A policy with the default method (occurrences), no latency SLI and the SRE
    /// workbook alerts.
    pub fn new(objective: f64, window: Duration) -> BudgetPolicy {
        BudgetPolicy {
            objective,
            window,
            method: BudgetMethod::Occurrences,
            timeslice: None,
            latency: None,
            alerts: AlertPolicy::sre_workbook_defaults(),
        }
    }

    /// How many minutes back from `now_minute` [`evaluate`] looks (window, alert
    /// windows and the 3d burn rate): fetch `route_minutes(…, now − this + 1, now)`.
    pub fn lookback_minutes(&self) -> i64 {
        let alerts = self.alerts.iter().map(|a| whole_minutes(a.long).unwrap_or(0));
        alerts.chain([whole_minutes(self.window).unwrap_or(0), 3 * 1440]).max().unwrap_or(3 * 1440)
    }

    /// The first bucket of [`LATENCY_BUCKETS_MS`](crate::LATENCY_BUCKETS_MS) whose
    /// requests are slow: the one after the bucket holding the threshold. `None`
    /// without a latency SLI.
    pub fn slow_from(&self) -> Option<usize> {
        self.latency.as_ref().map(|l| latency_bucket_index(l.threshold_ms) + 1)
    }
}

/// Evaluates `policy` over `minutes` (any number of routes; rows outside the lookback
/// or after `now_minute` are ignored). See the module docs for every definition.
pub fn evaluate(policy: &BudgetPolicy, minutes: &[RouteMinute], now_minute: i64) -> Result<BudgetReport, BudgetError> {
    let slow_from = policy.slow_from();
    let mut series = MinuteSeries::new(now_minute - policy.lookback_minutes() + 1);
    for m in minutes.iter().filter(|m| m.minute <= now_minute) {
        let timed: u64 = m.latency_buckets.iter().sum();
        let slow = slow_from.map_or(0, |first| m.latency_buckets.iter().skip(first).sum());
        series.add(m.minute, &MinuteCounts { total: m.total, bad: m.bad, timed, slow });
    }
    evaluate_minutes(policy, &series, now_minute)
}

/// [`evaluate`] over counts already summed per minute across the routes, with `slow`
/// counted from `policy.slow_from()` (minutes after `now_minute` or before the lookback
/// are ignored).
pub fn evaluate_minutes(
    policy: &BudgetPolicy,
    minutes: &MinuteSeries,
    now_minute: i64,
) -> Result<BudgetReport, BudgetError> {
    let p = Validated::new(policy)?;
    let series = Series { minutes, now: now_minute, p: &p };

    let window = series.sum(p.window_minutes);
    let bad_events = window.bad + window.slow;
    let (budget, consumed, consumed_tenths, exhausted) = match p.slice_minutes {
        None => {
            let allowed = u128::from(window.total) * p.allowed_ppb;
            let consumed = u128::from(bad_events) * PPB;
            // Whole events, rounded down; under ten, a fraction keeps its tenths (also
            // rounded down): a 99.9 % objective over 401 requests allows 0.4 of one,
            // which "0" would misstate as none at all.
            let shown = if allowed < 10 * PPB && allowed % PPB != 0 {
                format_tenths(i64::try_from(allowed * 10 / PPB).unwrap_or(i64::MAX))
            } else {
                (allowed / PPB).to_string()
            };
            (
                shown,
                bad_events.to_string(),
                round_div(consumed * 1000, allowed),
                window.total > 0 && consumed >= allowed,
            )
        }
        Some(slice) => {
            let budget_ms = u128::from(p.window_minutes.unsigned_abs()) * 60_000 * p.allowed_ppb;
            let bad_ms = u128::from(series.bad_slices(p.window_minutes, slice))
                * 60_000
                * u128::from(slice.unsigned_abs())
                * PPB;
            (
                format_duration(duration_ms(budget_ms / PPB)),
                format_duration(duration_ms(bad_ms / PPB)),
                round_div(bad_ms * 1000, budget_ms),
                bad_ms >= budget_ms,
            )
        }
    };

    let burn_rates = BURN_RATE_WINDOWS
        .iter()
        .map(|&(label, minutes)| {
            let (num, den) = series.error_ratio(minutes);
            let tenths = round_div(num * PPB * 10, den * p.allowed_ppb);
            (label.to_owned(), format_tenths(tenths))
        })
        .collect();

    let mut firing_alerts: Vec<String> = Vec::new();
    for (alert, long, short, rate_milli) in &p.alerts {
        let fires = [*long, *short].iter().all(|&minutes| {
            let (num, den) = series.error_ratio(minutes);
            num * PPB * 1000 > rate_milli * den * p.allowed_ppb
        });
        if fires && !firing_alerts.contains(&alert.name) {
            firing_alerts.push(alert.name.clone());
        }
    }

    let state = if exhausted {
        BudgetState::Exhausted
    } else if firing_alerts.is_empty() {
        BudgetState::Healthy
    } else {
        BudgetState::Burning
    };
    Ok(BudgetReport {
        budget,
        consumed,
        consumed_percent: format_tenths(consumed_tenths),
        remaining_percent: format_tenths(1000 - consumed_tenths),
        burn_rates,
        good_events: window.total.saturating_sub(bad_events),
        total_events: window.total,
        firing_alerts,
        state,
    })
}

fn duration_ms(ms: u128) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}
