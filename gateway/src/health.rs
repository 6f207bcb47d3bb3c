//! Per-upstream health in this process: the rolling success ratio behind effective
//! weights, the circuit breaker, the 429 cooldown and first-byte statistics for the
//! `auto` watchdog (docs/design.md §4.1, §4.3).
//!
//! Health is kept by upstream key and survives config reloads.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use sluice_crds::snapshot::{CircuitBreakerConfig, FirstByte};

use crate::outcome::Outcome;

/// Process-wide health settings.
#[derive(Clone, Copy, Debug)]
pub struct HealthSettings {
    /// Attempts older than this no longer count (default 60 s).
    pub window: Duration,
    /// Most attempts kept (default 100).
    pub max_samples: usize,
    /// Cooldown after a 429 without any reset hint (default 1 s).
    pub default_cooldown: Duration,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self { window: Duration::from_secs(60), max_samples: 100, default_cooldown: Duration::from_secs(1) }
    }
}

/// Circuit breaker state, as exported by `sluice_circuit_state` (0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Circuit {
    /// Traffic flows.
    Closed,
    /// Trials only.
    HalfOpen,
    /// Skipped until the instant.
    Open,
}

impl Circuit {
    /// Gauge value.
    pub fn gauge(self) -> i64 {
        match self {
            Circuit::Closed => 0,
            Circuit::HalfOpen => 1,
            Circuit::Open => 2,
        }
    }

    /// Name as in the CRD status.
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed => "Closed",
            Circuit::HalfOpen => "HalfOpen",
            Circuit::Open => "Open",
        }
    }
}

/// How the dispatcher may use an upstream right now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Availability {
    /// Normal candidate, with its success ratio.
    Available(f64),
    /// Due a trial: put first so that a recovered upstream is found (half-open, or
    /// demoted by failures and left untried for `openFor`).
    Trial,
    /// Open circuit or 429 cooldown: skipped unless everything is skipped.
    Skipped,
}

/// Health of one upstream.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<State>,
}

/// The outcomes in the window, oldest first, with the count of successes kept as they
/// come and go (the dispatcher reads the ratio on every request).
#[derive(Debug, Default)]
struct Samples {
    outcomes: VecDeque<(Instant, bool)>,
    ok: usize,
}

impl Samples {
    fn push(&mut self, at: Instant, ok: bool, max: usize) {
        self.outcomes.push_back((at, ok));
        self.ok += usize::from(ok);
        while self.outcomes.len() > max {
            self.pop();
        }
    }

    /// Drops the outcomes older than `window`.
    fn prune(&mut self, window: Duration, now: Instant) {
        while self.outcomes.front().is_some_and(|(at, _)| now.duration_since(*at) > window) {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some((_, ok)) = self.outcomes.pop_front() {
            self.ok -= usize::from(ok);
        }
    }

    fn clear(&mut self) {
        self.outcomes.clear();
        self.ok = 0;
    }

    /// (successes, failures).
    fn counts(&self) -> (usize, usize) {
        (self.ok, self.outcomes.len() - self.ok)
    }
}

#[derive(Debug, Default)]
struct State {
    samples: Samples,
    circuit: CircuitState,
    cooldown_until: Option<Instant>,
    last_attempt: Option<(Instant, Outcome)>,
    trials_in_flight: u32,
    first_byte_ms: Latest,
    gap_ms: Latest,
}

#[derive(Debug, Default, Clone, Copy)]
enum CircuitState {
    #[default]
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen,
}

const FIRST_BYTE_SAMPLES: usize = 200;
/// Inter-event gaps kept for `idle: auto`: a few long streams' worth.
const GAP_SAMPLES: usize = 1000;
/// Gaps needed before `idle: auto` trusts its p99; until then the cap applies.
const GAP_MIN_SAMPLES: usize = 20;
/// The smallest `idle: auto` limit.
const IDLE_FLOOR: Duration = Duration::from_secs(1);

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another request panicked mid-update; the
        // counters are still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Success ratio of recent attempts (no data counts as 1.0).
    pub fn success_ratio(&self, settings: &HealthSettings, now: Instant) -> f64 {
        let mut s = self.lock();
        s.prune(settings, now);
        s.ratio()
    }

    /// What the dispatcher may do with this upstream now. A `Trial` answer reserves a
    /// trial slot; the next [`Health::record`] returns it.
    pub fn availability(&self, cb: &CircuitBreakerConfig, settings: &HealthSettings, now: Instant) -> Availability {
        let mut s = self.lock();
        s.prune(settings, now);
        if let CircuitState::Open { until } = s.circuit {
            if now < until {
                return Availability::Skipped;
            }
            s.circuit = CircuitState::HalfOpen;
        }
        if s.cooldown_until.is_some_and(|t| now < t) {
            return Availability::Skipped;
        }
        // A demoted upstream (failing, but not failing enough to open the circuit) is
        // retried after half of openFor: with the default 30 s that bounds recovery at
        // a low request rate to 15 s plus the gap between requests, inside the 30 s the
        // contract asks for, while an open circuit waits the whole openFor. One demoted
        // by a 429 is retried as soon as its cooldown (above) is over: it said when.
        let demoted_retry = Duration::from_millis(cb.open_for_ms / 2);
        let due_trial = match s.circuit {
            CircuitState::HalfOpen => s.trials_in_flight < cb.half_open_requests,
            // Demoted by a failure and not tried since: without a trial it could stay
            // behind a healthy backup until its failures age out.
            _ => {
                s.trials_in_flight == 0
                    && s.ratio() < 1.0
                    && s.last_attempt.is_some_and(|(at, outcome)| match outcome {
                        Outcome::Ok => false,
                        Outcome::Http429 => true,
                        _ => now.duration_since(at) >= demoted_retry,
                    })
            }
        };
        if due_trial {
            s.trials_in_flight += 1;
            return Availability::Trial;
        }
        if matches!(s.circuit, CircuitState::HalfOpen) {
            return Availability::Skipped;
        }
        Availability::Available(s.ratio())
    }

    /// Whether a synthetic check sent now is a trial (docs/design.md §10). A check is sent
    /// whatever the circuit says: it is a trial when the upstream is due one, and also
    /// while the circuit is open, or half-open with every slot taken, since the check
    /// is then the only way the upstream is tried. A trial holds a slot, which the next
    /// [`Health::record`] gives back; a successful one closes the circuit.
    pub fn check_trial(&self, cb: &CircuitBreakerConfig, settings: &HealthSettings, now: Instant) -> bool {
        if self.availability(cb, settings, now) == Availability::Trial {
            return true;
        }
        let mut s = self.lock();
        if matches!(s.circuit, CircuitState::Closed) {
            return false;
        }
        s.trials_in_flight += 1;
        true
    }

    /// Gives back a trial slot taken by [`Health::availability`] that was not used.
    pub fn cancel_trial(&self) {
        let mut s = self.lock();
        s.trials_in_flight = s.trials_in_flight.saturating_sub(1);
    }

    /// Records an attempt. `trial` says whether it used a trial slot; `retry_after`
    /// is the throttling hint of a 429.
    pub fn record(
        &self,
        outcome: Outcome,
        trial: bool,
        retry_after: Option<Duration>,
        cb: &CircuitBreakerConfig,
        settings: &HealthSettings,
        now: Instant,
    ) {
        let mut s = self.lock();
        if trial {
            s.trials_in_flight = s.trials_in_flight.saturating_sub(1);
        }
        // A client error says nothing about the upstream's health.
        if outcome == Outcome::Http4xx {
            return;
        }
        let ok = outcome == Outcome::Ok;
        if outcome == Outcome::Http429 {
            s.cooldown_until = Some(now + retry_after.unwrap_or(settings.default_cooldown));
        }
        s.last_attempt = Some((now, outcome));
        if ok && (trial || matches!(s.circuit, CircuitState::HalfOpen)) {
            // A successful trial clears the failure history (docs/design.md §4.1).
            s.samples.clear();
            s.circuit = CircuitState::Closed;
        }
        s.samples.push(now, ok, settings.max_samples);
        s.prune(settings, now);
        if ok {
            return;
        }
        let open = Duration::from_millis(cb.open_for_ms);
        match s.circuit {
            CircuitState::HalfOpen => s.circuit = CircuitState::Open { until: now + open },
            // A synthetic check taken as the trial of an open circuit failed: it stays
            // open for another `openFor` from now.
            CircuitState::Open { .. } if trial => s.circuit = CircuitState::Open { until: now + open },
            CircuitState::Closed if outcome != Outcome::Http429 => {
                let (ok, failures) = s.samples.counts();
                let (n, failures) = ((ok + failures) as u64, failures as u64);
                if n >= u64::from(cb.minimum_requests) && failures * 100 >= u64::from(cb.failure_rate_percent) * n {
                    s.circuit = CircuitState::Open { until: now + open };
                }
            }
            _ => {}
        }
    }

    /// Records a first-byte time for the `auto` watchdog.
    pub fn record_first_byte(&self, elapsed: Duration) {
        let mut s = self.lock();
        s.first_byte_ms.push(u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX), FIRST_BYTE_SAMPLES);
    }

    /// The first-byte watchdog limit (docs/design.md §4.3).
    pub fn first_byte_limit(&self, setting: FirstByte) -> Duration {
        match setting {
            FirstByte::FixedMs(ms) => Duration::from_millis(ms),
            FirstByte::Auto => {
                let s = self.lock();
                if s.first_byte_ms.len() < 20 {
                    return Duration::from_secs(5);
                }
                Duration::from_millis((u64::from(s.first_byte_ms.p99()) * 3).max(50))
            }
        }
    }

    /// Records a gap between two chunks of a stream, for `idle: auto`.
    pub fn record_gap(&self, gap: Duration) {
        let mut s = self.lock();
        s.gap_ms.push(u32::try_from(gap.as_millis()).unwrap_or(u32::MAX), GAP_SAMPLES);
    }

    /// The idle limit of a stream (docs/design.md §2, `timeouts.idle`): `cap` as
    /// configured, or with `auto` 10 × the rolling p99 gap, at least 1 s and at most
    /// `cap` (the cap until 20 gaps were seen).
    pub fn idle_limit(&self, auto: bool, cap: Duration) -> Duration {
        if !auto {
            return cap;
        }
        let s = self.lock();
        if s.gap_ms.len() < GAP_MIN_SAMPLES {
            return cap;
        }
        let p99 = s.gap_ms.p99();
        Duration::from_millis(u64::from(p99) * 10).max(IDLE_FLOOR).min(cap)
    }

    /// Recent (successes, failures), for heartbeats.
    pub fn counts(&self, settings: &HealthSettings, now: Instant) -> (u64, u64) {
        let mut s = self.lock();
        s.prune(settings, now);
        let (ok, failed) = s.samples.counts();
        (ok as u64, failed as u64)
    }

    /// Current circuit state, for metrics and heartbeats.
    pub fn circuit(&self, now: Instant) -> Circuit {
        match self.lock().circuit {
            CircuitState::Closed => Circuit::Closed,
            CircuitState::HalfOpen => Circuit::HalfOpen,
            CircuitState::Open { until } if now >= until => Circuit::HalfOpen,
            CircuitState::Open { .. } => Circuit::Open,
        }
    }
}

impl State {
    fn prune(&mut self, settings: &HealthSettings, now: Instant) {
        self.samples.prune(settings.window, now);
    }

    fn ratio(&self) -> f64 {
        match self.samples.counts() {
            (0, 0) => 1.0,
            (ok, failed) => ok as f64 / (ok + failed) as f64,
        }
    }
}

/// The latest samples of a time in ms (at most a cap), in arrival order and sorted: the
/// watchdog reads their p99 on every streamed request and the idle limit at every gap,
/// so it is a lookup, not a sort.
#[derive(Debug, Default)]
struct Latest {
    arrived: VecDeque<u32>,
    sorted: Vec<u32>,
}

impl Latest {
    fn push(&mut self, ms: u32, cap: usize) {
        self.arrived.push_back(ms);
        let at = self.sorted.partition_point(|v| *v < ms);
        self.sorted.insert(at, ms);
        while self.arrived.len() > cap {
            if let Some(old) = self.arrived.pop_front() {
                let at = self.sorted.partition_point(|v| *v < old);
                self.sorted.remove(at);
            }
        }
    }

    fn len(&self) -> usize {
        self.arrived.len()
    }

    /// The 99th percentile (nearest rank); 0 without samples.
    fn p99(&self) -> u32 {
        let idx = ((self.sorted.len() as f64) * 0.99).ceil() as usize;
        self.sorted.get(idx.saturating_sub(1)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
