//! The states over time: replays a route's history minute by minute through
//! [`crate::rules`], applying the candidates' hysteresis, and derives the incidents
//! (docs/design.md §10). Pure: the history and `now` are inputs.
//!
//! Steps are taken at the end of every minute of the lookback and at `now`, so a state
//! that lasted less than a minute in the past may be missed; `now` is always exact.
//! History has no circuit (heartbeats hold only the latest state): the circuit weighs
//! only on the step at `now`.

use std::collections::BTreeMap;

use crate::rules::{Circuit, Counts, Evidence, LIVE_WINDOW_MINUTES, Status, Synthetic, candidate_rules, route_rules};

/// Milliseconds per minute.
const MINUTE_MS: i64 = 60_000;

/// One synthetic check of a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// When it finished, unix milliseconds.
    pub at_ms: i64,
    /// Whether it succeeded.
    pub ok: bool,
}

/// A candidate's history.
#[derive(Clone, Copy, Debug)]
pub struct CandidateHistory<'a> {
    /// The route's synthetic interval; `None`: no synthetic checks.
    pub interval_ms: Option<i64>,
    /// Its checks, oldest first.
    pub checks: &'a [Check],
    /// Its upstream's attempts by unix minute.
    pub live: &'a BTreeMap<i64, Counts>,
    /// The circuit now.
    pub circuit: Circuit,
}

/// A route's history.
#[derive(Clone, Debug)]
pub struct RouteHistory<'a> {
    /// Client requests by unix minute (`ok` good, `failed` bad).
    pub clients: &'a BTreeMap<i64, Counts>,
    /// The client success objective.
    pub objective: f64,
    /// Its candidates.
    pub candidates: Vec<CandidateHistory<'a>>,
}

/// A span of time when a route was not operational.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incident {
    /// Start of the minute it began in, unix milliseconds.
    pub started_ms: i64,
    /// Start of the minute the route was operational again; `None`: still open.
    pub resolved_ms: Option<i64>,
    /// The worst state it reached.
    pub worst: Status,
    /// Each change of state while it lasted: (start of its minute, state), first one
    /// at `started_ms`.
    pub changes: Vec<(i64, Status)>,
}

/// What the replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteReplay {
    /// The route's state now.
    pub status: Status,
    /// Each candidate's state now, in order.
    pub candidates: Vec<Status>,
    /// When each candidate's state last changed (start of that minute), if in the
    /// lookback.
    pub candidate_changed_ms: Vec<Option<i64>>,
    /// When the route's state last changed, if in the lookback.
    pub changed_ms: Option<i64>,
    /// Incidents that overlap the lookback, oldest first.
    pub incidents: Vec<Incident>,
}

/// A per-minute series as prefix sums over a fixed span of minutes, so that any
/// window is two subtractions.
#[derive(Clone, Debug)]
struct Dense {
    first: i64,
    ok: Vec<u64>,
    failed: Vec<u64>,
}

impl Dense {
    /// Minutes `first ..= last` of `series`.
    fn new(series: &BTreeMap<i64, Counts>, first: i64, last: i64) -> Dense {
        let len = usize::try_from(last - first + 1).unwrap_or(0);
        let (mut ok, mut failed) = (vec![0; len + 1], vec![0; len + 1]);
        for (m, n) in series.range(first..=last) {
            let i = usize::try_from(m - first).unwrap_or(0) + 1;
            ok[i] = n.ok;
            failed[i] = n.failed;
        }
        for i in 1..=len {
            ok[i] += ok[i - 1];
            failed[i] += failed[i - 1];
        }
        Dense { first, ok, failed }
    }

    /// Sum of minutes `from ..= to` (clamped to the span).
    fn window(&self, from: i64, to: i64) -> Counts {
        let len = self.ok.len() - 1;
        let index = |m: i64| usize::try_from((m - self.first).max(0)).unwrap_or(0).min(len);
        let (a, b) = (index(from), index(to.saturating_add(1)));
        if a >= b {
            return Counts::default();
        }
        Counts { ok: self.ok[b] - self.ok[a], failed: self.failed[b] - self.failed[a] }
    }
}

/// A candidate's history prepared for the replay.
struct Prepared<'a> {
    c: &'a CandidateHistory<'a>,
    live: Dense,
}

/// Hysteresis state of one candidate.
#[derive(Clone, Copy, Debug)]
struct Tracker {
    status: Status,
    /// Live minutes before this one are forgotten (set when the candidate recovers, so
    /// that the failures it recovered from do not keep it degraded for the window).
    live_from: i64,
    changed_ms: Option<i64>,
    /// Checks finished by the step being taken: `checks[..seen]` (steps only move on,
    /// so these cursors only move forward, instead of a search per step).
    seen: usize,
    /// Of those, the ones before the last two intervals: `checks[recent..seen]` are
    /// recent.
    recent: usize,
}

impl Tracker {
    /// Moves the cursors to `t`.
    fn advance(&mut self, c: &CandidateHistory<'_>, t: i64) {
        let Some(interval) = c.interval_ms else {
            return;
        };
        while self.seen < c.checks.len() && c.checks[self.seen].at_ms <= t {
            self.seen += 1;
        }
        let since = t - 2 * interval;
        while self.recent < self.seen && c.checks[self.recent].at_ms <= since {
            self.recent += 1;
        }
    }
}

/// Replays `history` from the minute of `from_ms` to `now_ms`.
pub fn replay(history: &RouteHistory<'_>, from_ms: i64, now_ms: i64) -> RouteReplay {
    let mut trackers: Vec<Tracker> = history
        .candidates
        .iter()
        .map(|_| Tracker { status: Status::Operational, live_from: i64::MIN, changed_ms: None, seen: 0, recent: 0 })
        .collect();
    let mut route = Status::Operational;
    let mut changed_ms = None;
    let mut incidents: Vec<Incident> = Vec::new();
    let now_minute = now_ms.div_euclid(MINUTE_MS);
    let from_minute = from_ms.div_euclid(MINUTE_MS);
    let longest = history.candidates.iter().filter_map(|c| c.interval_ms).max().unwrap_or(0);
    let span_from = from_minute - LIVE_WINDOW_MINUTES - (2 * longest).div_euclid(MINUTE_MS) - 1;
    let prepared: Vec<Prepared<'_>> =
        history.candidates.iter().map(|c| Prepared { c, live: Dense::new(c.live, span_from, now_minute) }).collect();
    let clients_dense = Dense::new(history.clients, span_from, now_minute);
    let steps = (from_ms.div_euclid(MINUTE_MS)..now_minute)
        .map(|m| (m * MINUTE_MS + MINUTE_MS - 1, false))
        .chain([(now_ms, true)]);
    let mut states = Vec::with_capacity(trackers.len());
    for (t, is_now) in steps {
        let minute_start = t.div_euclid(MINUTE_MS) * MINUTE_MS;
        states.clear();
        for (p, tracker) in prepared.iter().zip(trackers.iter_mut()) {
            let circuit = is_now.then_some(p.c.circuit);
            let next = step(p, tracker, t, circuit);
            if next != tracker.status {
                tracker.status = next;
                tracker.changed_ms = Some(minute_start);
            }
            states.push(next);
        }
        let m = t.div_euclid(MINUTE_MS);
        let clients = clients_dense.window(m - LIVE_WINDOW_MINUTES + 1, m);
        let next = route_rules(&states, clients, history.objective);
        if next != route {
            changed_ms = Some(minute_start);
            if route == Status::Operational {
                incidents.push(Incident {
                    started_ms: minute_start,
                    resolved_ms: None,
                    worst: next,
                    changes: vec![(minute_start, next)],
                });
            } else if let Some(open) = incidents.last_mut() {
                if next == Status::Operational {
                    open.resolved_ms = Some(minute_start);
                } else {
                    open.worst = open.worst.max(next);
                    open.changes.push((minute_start, next));
                }
            }
            route = next;
        }
    }
    RouteReplay {
        status: route,
        candidates: trackers.iter().map(|t| t.status).collect(),
        candidate_changed_ms: trackers.iter().map(|t| t.changed_ms).collect(),
        changed_ms,
        incidents,
    }
}

/// One candidate's next state at `t`: the rules, then the hysteresis. With synthetic
/// checks, a candidate that is not operational becomes operational only after two
/// consecutive successful checks with no live failure since the first of them; it is
/// degraded meanwhile. Without checks there is no hysteresis.
fn step(p: &Prepared<'_>, tracker: &mut Tracker, t: i64, circuit: Option<Circuit>) -> Status {
    let c = p.c;
    tracker.advance(c, t);
    let rules = candidate_rules(&evidence(p, tracker, t, tracker.live_from, circuit));
    if c.interval_ms.is_none() || tracker.status == Status::Operational {
        return rules;
    }
    let recovered_from = match c.checks[..tracker.seen] {
        [.., older, latest] if older.ok && latest.ok => {
            let from = older.at_ms.div_euclid(MINUTE_MS);
            let quiet = p.live.window(from, t.div_euclid(MINUTE_MS)).failed == 0;
            quiet.then_some(from)
        }
        _ => None,
    };
    match recovered_from {
        Some(from) => {
            tracker.live_from = from;
            candidate_rules(&evidence(p, tracker, t, from, circuit))
        }
        None => rules.max(Status::DegradedPerformance),
    }
}

/// The evidence at `t` (the tracker's cursors moved to it), counting live minutes from
/// `live_from` on.
fn evidence(p: &Prepared<'_>, tracker: &Tracker, t: i64, live_from: i64, circuit: Option<Circuit>) -> Evidence {
    let c = p.c;
    let m = t.div_euclid(MINUTE_MS);
    let live = p.live.window((m - LIVE_WINDOW_MINUTES + 1).max(live_from), m);
    let (synthetic, live_recent) = match c.interval_ms {
        Some(interval) => {
            let seen = &c.checks[..tracker.seen];
            let since = t - 2 * interval;
            let mut recent = Counts::default();
            for k in &seen[tracker.recent..] {
                if k.ok {
                    recent.ok += 1;
                } else {
                    recent.failed += 1;
                }
            }
            let s = Synthetic {
                latest_ok: seen.last().map(|k| k.ok),
                previous_ok: seen.len().checked_sub(2).map(|i| seen[i].ok),
                recent,
            };
            let live_recent = p.live.window(since.div_euclid(MINUTE_MS).max(live_from), m);
            (Some(s), live_recent)
        }
        None => (None, Counts::default()),
    };
    Evidence { synthetic, live, live_recent, circuit }
}

#[cfg(test)]
mod tests;
