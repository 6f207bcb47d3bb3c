//! The state rules of docs/design.md §10, as pure functions of counts: what a candidate's
//! attempts and circuit say, what a route's candidates and clients say, and the page's
//! indicator. The history and the hysteresis ("back to operational after two good
//! checks") are in [`crate::replay`].

use serde::Serialize;

/// Live success is judged over this many minutes.
pub const LIVE_WINDOW_MINUTES: i64 = 5;
/// Fewer live attempts than this in the window say nothing about success.
pub const LIVE_MIN_ATTEMPTS: u64 = 20;
/// Client success objective of a route that no ErrorBudget names.
pub const DEFAULT_OBJECTIVE: f64 = 0.999;

/// A component's status, with exactly Statuspage's values, ordered from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything works.
    Operational,
    /// Works, with failures that failover or retries hide.
    DegradedPerformance,
    /// Some requests fail.
    PartialOutage,
    /// Nothing works.
    MajorOutage,
}

/// The page's overall indicator, with exactly Statuspage's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Indicator {
    /// All operational.
    None,
    /// The worst is degraded performance.
    Minor,
    /// The worst is a partial outage.
    Major,
    /// The worst is a major outage.
    Critical,
}

/// A circuit breaker's state as the gateways' heartbeats report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Circuit {
    /// No fresh heartbeat names the upstream.
    Unknown,
    /// Closed on every gateway.
    Closed,
    /// Half-open on at least one gateway, open on none.
    HalfOpen,
    /// Open on at least one gateway.
    Open,
}

/// Successful and failed attempts (or requests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Successes.
    pub ok: u64,
    /// Failures.
    pub failed: u64,
}

/// What a candidate's attempts say at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// `Some` when the route has synthetic checks.
    pub synthetic: Option<Synthetic>,
    /// Live attempts over the last [`LIVE_WINDOW_MINUTES`].
    pub live: Counts,
    /// Live attempts in the minutes of the last two synthetic intervals.
    pub live_recent: Counts,
    /// The circuit now (history has none: `Unknown`).
    pub circuit: Option<Circuit>,
}

/// What a candidate's synthetic checks say at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Synthetic {
    /// The latest check: `Some(true)` when it succeeded.
    pub latest_ok: Option<bool>,
    /// The one before it.
    pub previous_ok: Option<bool>,
    /// Checks over the last two intervals.
    pub recent: Counts,
}

impl Status {
    /// Every value, best first.
    pub const ALL: [Status; 4] =
        [Status::Operational, Status::DegradedPerformance, Status::PartialOutage, Status::MajorOutage];

    /// The Statuspage value, e.g. `degraded_performance`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Operational => "operational",
            Status::DegradedPerformance => "degraded_performance",
            Status::PartialOutage => "partial_outage",
            Status::MajorOutage => "major_outage",
        }
    }

    /// In words, for people.
    pub fn words(self) -> &'static str {
        match self {
            Status::Operational => "Operational",
            Status::DegradedPerformance => "Degraded performance",
            Status::PartialOutage => "Partial outage",
            Status::MajorOutage => "Major outage",
        }
    }

    /// The page indicator when this is the worst status.
    pub fn indicator(self) -> Indicator {
        match self {
            Status::Operational => Indicator::None,
            Status::DegradedPerformance => Indicator::Minor,
            Status::PartialOutage => Indicator::Major,
            Status::MajorOutage => Indicator::Critical,
        }
    }
}

impl Indicator {
    /// The Statuspage value, e.g. `minor`.
    pub fn as_str(self) -> &'static str {
        match self {
            Indicator::None => "none",
            Indicator::Minor => "minor",
            Indicator::Major => "major",
            Indicator::Critical => "critical",
        }
    }

    /// The sentence Statuspage shows for it.
    pub fn description(self) -> &'static str {
        match self {
            Indicator::None => "All Systems Operational",
            Indicator::Minor => "Minor Service Outage",
            Indicator::Major => "Partial System Outage",
            Indicator::Critical => "Major Service Outage",
        }
    }
}

impl Circuit {
    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            Circuit::Unknown => "unknown",
            Circuit::Closed => "closed",
            Circuit::HalfOpen => "half-open",
            Circuit::Open => "open",
        }
    }

    /// Parses a heartbeat's `Closed`/`Open`/`HalfOpen`.
    pub fn from_heartbeat(text: &str) -> Circuit {
        match text {
            "Closed" => Circuit::Closed,
            "HalfOpen" => Circuit::HalfOpen,
            "Open" => Circuit::Open,
            _ => Circuit::Unknown,
        }
    }
}

impl Counts {
    /// All of them.
    pub fn total(self) -> u64 {
        self.ok + self.failed
    }

    /// Adds another count.
    pub fn add(&mut self, other: Counts) {
        self.ok += other.ok;
        self.failed += other.failed;
    }

    /// Success ratio, `None` without any.
    pub fn ratio(self) -> Option<f64> {
        let total = self.total();
        (total > 0).then(|| self.ok as f64 / total as f64)
    }

    /// Success is below `percent` with at least [`LIVE_MIN_ATTEMPTS`] (integer maths,
    /// so 99 % of 100 is not below 99 %).
    fn below(self, percent: u64) -> bool {
        self.total() >= LIVE_MIN_ATTEMPTS && self.ok * 100 < percent * self.total()
    }
}

/// A candidate's status from its evidence, before hysteresis (docs/design.md §10):
/// major when every attempt of the last two synthetic intervals failed (without
/// synthetic checks: every one of at least [`LIVE_MIN_ATTEMPTS`] live attempts over the
/// window); partial when the latest two checks failed, live success is below 90 % or
/// the circuit is open; degraded when the latest check failed, live success is below
/// 99 % or the circuit is half-open.
pub fn candidate_rules(e: &Evidence) -> Status {
    let major = match e.synthetic {
        Some(s) => s.recent.total() > 0 && s.recent.ok == 0 && e.live_recent.ok == 0,
        None => e.live.total() >= LIVE_MIN_ATTEMPTS && e.live.ok == 0,
    };
    let (latest, previous) = e.synthetic.map_or((None, None), |s| (s.latest_ok, s.previous_ok));
    if major {
        Status::MajorOutage
    } else if (latest == Some(false) && previous == Some(false)) || e.live.below(90) || e.circuit == Some(Circuit::Open)
    {
        Status::PartialOutage
    } else if latest == Some(false) || e.live.below(99) || e.circuit == Some(Circuit::HalfOpen) {
        Status::DegradedPerformance
    } else {
        Status::Operational
    }
}

/// A route group's status: major when every candidate is in major outage; partial
/// when clients see failures (success over the window below `objective`; no traffic is
/// no failure); degraded as soon as any candidate is not operational.
pub fn route_rules(candidates: &[Status], clients: Counts, objective: f64) -> Status {
    if !candidates.is_empty() && candidates.iter().all(|s| *s == Status::MajorOutage) {
        Status::MajorOutage
    } else if clients.ratio().is_some_and(|r| r < objective && clients.failed > 0) {
        Status::PartialOutage
    } else if candidates.iter().any(|s| *s != Status::Operational) {
        Status::DegradedPerformance
    } else {
        Status::Operational
    }
}

/// The page indicator: that of the worst route.
pub fn indicator(routes: impl IntoIterator<Item = Status>) -> Indicator {
    routes.into_iter().max().unwrap_or(Status::Operational).indicator()
}

#[cfg(test)]
mod tests;
