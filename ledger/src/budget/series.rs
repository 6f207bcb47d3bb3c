//! The internals of [`evaluate`](super::evaluate): a policy validated into integers,
//! and per-minute counts summed over windows and slices.

use std::time::Duration;

use super::{AlertPolicy, BudgetError, BudgetMethod, BudgetPolicy};

/// Parts per billion in one.
pub(super) const PPB: u128 = 1_000_000_000;

/// Counters of one minute of a budget's routes, all routes added up: what
/// [`evaluate_minutes`](super::evaluate_minutes) reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinuteCounts {
    /// Requests that count for the SLO.
    pub total: u64,
    /// Bad by status.
    pub bad: u64,
    /// Requests in the latency histogram (not bad by status).
    pub timed: u64,
    /// Of those, in the histogram buckets from
    /// [`BudgetPolicy::slow_from`](super::BudgetPolicy::slow_from) on; 0 without a
    /// latency SLI.
    pub slow: u64,
}

impl MinuteCounts {
    pub(super) fn add(&mut self, other: &MinuteCounts) {
        self.total += other.total;
        self.bad += other.bad;
        self.timed += other.timed;
        self.slow += other.slow;
    }
}

/// A budget's minutes from `first` on, dense (a minute without traffic is zeros), so
/// that summing a 30-day window walks one contiguous array.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MinuteSeries {
    first: i64,
    counts: Vec<MinuteCounts>,
}

impl MinuteSeries {
    /// An empty series starting at `first`.
    pub fn new(first: i64) -> MinuteSeries {
        MinuteSeries { first, counts: Vec::new() }
    }

    /// A series starting at `first` holding `rows` (as [`Ledger::budget_minutes`]
    /// returns them), minutes before `first` left out.
    ///
    /// [`Ledger::budget_minutes`]: crate::Ledger::budget_minutes
    pub fn from_rows<'r>(first: i64, rows: impl IntoIterator<Item = &'r (i64, MinuteCounts)>) -> MinuteSeries {
        let mut series = MinuteSeries::new(first);
        for (minute, counts) in rows {
            series.add(*minute, counts);
        }
        series
    }

    /// The counts of `minute` (zeros outside the series).
    pub fn get(&self, minute: i64) -> MinuteCounts {
        usize::try_from(minute - self.first).ok().and_then(|i| self.counts.get(i).copied()).unwrap_or_default()
    }

    /// Adds `counts` to `minute`; minutes before the first are ignored.
    pub fn add(&mut self, minute: i64, counts: &MinuteCounts) {
        let Ok(i) = usize::try_from(minute - self.first) else {
            return;
        };
        if i >= self.counts.len() {
            self.counts.resize(i + 1, MinuteCounts::default());
        }
        self.counts[i].add(counts);
    }

    /// Keeps the minutes `from ≤ minute < to` only; the series then starts at `from`.
    pub fn keep(&mut self, from: i64, to: i64) {
        let end = usize::try_from(to - self.first).unwrap_or(0);
        self.counts.truncate(end);
        match usize::try_from(from - self.first) {
            Ok(drop) => {
                self.counts.drain(..drop.min(self.counts.len()));
            }
            Err(_) => {
                // `from` is before the first minute: pad the front.
                let pad = usize::try_from(self.first - from).unwrap_or(0);
                self.counts.splice(0..0, std::iter::repeat_n(MinuteCounts::default(), pad));
            }
        }
        self.first = from;
    }

    /// Sum over `from ..= to`.
    fn sum(&self, from: i64, to: i64) -> MinuteCounts {
        let lo = usize::try_from(from.max(self.first) - self.first).unwrap_or(0);
        let hi = usize::try_from(to - self.first + 1).unwrap_or(0).min(self.counts.len());
        let mut sum = MinuteCounts::default();
        for c in self.counts.get(lo..hi).unwrap_or_default() {
            sum.add(c);
        }
        sum
    }
}

/// A policy checked and turned into integers.
pub(super) struct Validated<'a> {
    /// (1 − objective) in parts per billion.
    pub allowed_ppb: u128,
    pub window_minutes: i64,
    /// `Some(slice minutes)` for timeslices.
    pub slice_minutes: Option<i64>,
    /// First histogram bucket counted as slow, with a latency SLI.
    pub slow_from: Option<usize>,
    /// (100 − percentile)% in parts per billion.
    pub allowed_slow_ppb: u128,
    /// Alert, long and short minutes, burn rate in thousandths.
    pub alerts: Vec<(&'a AlertPolicy, i64, i64, u128)>,
}

impl<'a> Validated<'a> {
    pub fn new(policy: &'a BudgetPolicy) -> Result<Validated<'a>, BudgetError> {
        if !(policy.objective > 0.5 && policy.objective < 1.0) {
            return Err(BudgetError::Objective(policy.objective));
        }
        let allowed_ppb = PPB - to_ppb(policy.objective);
        let window_minutes = whole_minutes(policy.window).ok_or(BudgetError::Window(policy.window))?;
        let slice_minutes = match policy.method {
            BudgetMethod::Occurrences => None,
            BudgetMethod::Timeslices => {
                let timeslice = policy.timeslice.unwrap_or(Duration::from_secs(60));
                let bad = || BudgetError::Timeslice { timeslice, window: policy.window };
                let slice = whole_minutes(timeslice).ok_or_else(bad)?;
                if window_minutes % slice != 0 {
                    return Err(bad());
                }
                Some(slice)
            }
        };
        let allowed_slow_ppb = match &policy.latency {
            None => 0,
            Some(l) => {
                if !(l.percentile > 0.0 && l.percentile < 100.0) {
                    return Err(BudgetError::Percentile(l.percentile));
                }
                PPB - to_ppb(l.percentile / 100.0)
            }
        };
        let slow_from = policy.slow_from();
        let mut alerts = Vec::with_capacity(policy.alerts.len());
        for a in &policy.alerts {
            let fail = |reason| BudgetError::Alert { name: a.name.clone(), reason };
            let long =
                whole_minutes(a.long).ok_or_else(|| fail("longWindow must be a positive whole number of minutes"))?;
            let short =
                whole_minutes(a.short).ok_or_else(|| fail("shortWindow must be a positive whole number of minutes"))?;
            if !(a.burn_rate.is_finite() && a.burn_rate > 0.0) {
                return Err(fail("burnRate must be a positive number"));
            }
            // Rounded to thousandths, as the decimal strings of the CRD are.
            let rate_milli = (a.burn_rate * 1000.0).round() as u128;
            alerts.push((a, long, short, rate_milli));
        }
        Ok(Validated { allowed_ppb, window_minutes, slice_minutes, slow_from, allowed_slow_ppb, alerts })
    }
}

/// Per-minute counts plus the policy, to sum windows and judge slices.
pub(super) struct Series<'a> {
    pub minutes: &'a MinuteSeries,
    pub now: i64,
    pub p: &'a Validated<'a>,
}

impl Series<'_> {
    /// Sum over the `minutes` minutes ending at `end` (inclusive).
    fn sum_ending(&self, end: i64, minutes: i64) -> MinuteCounts {
        self.minutes.sum(end - minutes + 1, end)
    }

    pub fn sum(&self, minutes: i64) -> MinuteCounts {
        self.sum_ending(self.now, minutes)
    }

    /// Bad slices among the newest ones whose newest minute lies in the last `minutes`.
    pub fn bad_slices(&self, minutes: i64, slice: i64) -> u64 {
        let slices = (minutes + slice - 1) / slice;
        (0..slices).filter(|k| self.slice_is_bad(&self.sum_ending(self.now - k * slice, slice))).count() as u64
    }

    fn slice_is_bad(&self, c: &MinuteCounts) -> bool {
        if c.total == 0 {
            return false;
        }
        let errors = u128::from(c.bad) * PPB > self.p.allowed_ppb * u128::from(c.total);
        let slow = self.p.slow_from.is_some()
            && c.timed > 0
            && u128::from(c.slow) * PPB > self.p.allowed_slow_ppb * u128::from(c.timed);
        errors || slow
    }

    /// Error ratio over the last `minutes` as (numerator, denominator); (0, 1) when
    /// there is nothing to count.
    pub fn error_ratio(&self, minutes: i64) -> (u128, u128) {
        let ratio = match self.p.slice_minutes {
            None => {
                let c = self.sum(minutes);
                (u128::from(c.bad + c.slow), u128::from(c.total))
            }
            Some(slice) => {
                let bad = i64::try_from(self.bad_slices(minutes, slice)).unwrap_or(i64::MAX);
                let bad_minutes = bad.saturating_mul(slice).min(minutes);
                (u128::from(bad_minutes.unsigned_abs()), u128::from(minutes.unsigned_abs()))
            }
        };
        if ratio.1 == 0 { (0, 1) } else { ratio }
    }
}

/// A duration as positive whole minutes, if it is one.
pub(super) fn whole_minutes(d: Duration) -> Option<i64> {
    let ms = d.as_millis();
    if ms == 0 || !ms.is_multiple_of(60_000) {
        return None;
    }
    i64::try_from(ms / 60_000).ok()
}

/// A ratio in (0, 1) to parts per billion, rounded to the nearest.
fn to_ppb(ratio: f64) -> u128 {
    (ratio * 1e9).round() as u128
}
